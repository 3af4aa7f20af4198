#include "base/read_file.hpp"
#include "launcher/host/slurm_step.hpp"

#include <spdlog/spdlog.h>

#include "launcher/host/host_facts.hpp"
#include "launcher/processes/proc_scan.hpp"

namespace rankrun::launcher {

bool SlurmStep::signalled_by_slurm(pid_t sender) const {
  if (!inside() || sender <= 1) return false;
  const auto comm = read_file_head("/proc/" + std::to_string(sender) + "/comm", 64);
  return comm && comm->rfind("slurmstepd", 0) == 0;
}

void SlurmStep::requeue() {
  if (m_requeued) return;
  m_requeued = true;
  if (!inside()) {
    spdlog::warn("--requeue-on-preempt: not inside a Slurm job; nothing to requeue");
    return;
  }
  // The reap loop cannot take scontrol's exit status meanwhile: it is short.
  const auto [status, out] = run_shell("scontrol requeue " + m_job_id + " 2>&1", 4096);
  if (status == 0) {
    spdlog::warn("requeued Slurm job {} (--requeue-on-preempt)", m_job_id);
  } else {
    spdlog::error("'scontrol requeue {}' failed: {}", m_job_id, out.empty() ? "could not run it" : out);
  }
}

}  // namespace rankrun::launcher
