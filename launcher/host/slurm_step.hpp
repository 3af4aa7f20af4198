#pragma once
// The Slurm job step rankrun runs in, as the Job meets it: who sent a signal, and the requeue
// that --requeue-on-preempt asks for.

#include <sys/types.h>

#include <string>

namespace rankrun::launcher {

class SlurmStep {
 public:
  /// `job_id`: SLURM_JOB_ID; empty outside Slurm.
  explicit SlurmStep(std::string job_id) : m_job_id(std::move(job_id)) {}

  bool inside() const { return !m_job_id.empty(); }
  /// A slurmstepd sent the signal: it signals every process of its step, rankrun's workers
  /// included (whether rankrun is the step's task or runs under a shell that is).
  bool signalled_by_slurm(pid_t sender) const;
  /// `scontrol requeue JOB`, once; the outcome is logged. Synchronous and short.
  void requeue();

 private:
  std::string m_job_id;
  bool m_requeued = false;
};

}  // namespace rankrun::launcher
