#include "launcher/processes/leftovers.hpp"

#include <spdlog/spdlog.h>

#include "launcher/processes/guardian.hpp"
#include "launcher/processes/job_cgroup.hpp"

namespace rankrun::launcher {

namespace {
// /proc is read on every step; short enough that teardown stays quick, long enough that
// polling costs little on two cores.
constexpr auto k_poll = std::chrono::milliseconds(10);
}  // namespace

LeftoverSweeper::LeftoverSweeper(boost::asio::io_context& io, JobScope scope, JobCgroup* cgroup, int shm_watch,
                                 Guardian* guardian, CleanupLimits limits)
    : m_scope(std::move(scope)),
      m_cgroup(cgroup),
      m_shm(
          io, k_shm_dir, shm_watch, [this](pid_t pid) { return belongs_to_job(pid, m_scope); },
          [guardian](const std::string& name, ino_t inode) {
            if (guardian) guardian->remember_segment(name, inode);
          }),
      m_limits(limits),
      m_timer(io) {}

void LeftoverSweeper::clean_up(std::size_t workers, std::function<void(bool)> done) {
  m_done = std::move(done);
  m_workers = workers;
  m_stuck.clear();
  m_seen.clear();
  m_killing_since.reset();
  m_scanned = false;
  m_began = std::chrono::steady_clock::now();
  tick();
}

void LeftoverSweeper::close() {
  m_timer.cancel();
  m_shm.stop();
}

void LeftoverSweeper::tick() {
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - m_began).count();
  const auto job = find_job_processes(m_scope);
  for (const auto& p : job) m_seen.insert(p.pid);
  const auto decision = decide_cleanup(job, elapsed, m_killing_since, m_limits);
  const bool kills = decision.step == CleanupStep::KillOthers || decision.step == CleanupStep::Kill;
  if (kills && !m_scanned) {
    // Segment creators must still be alive to be confirmed as the job's.
    m_shm.scan_existing();
    m_scanned = true;
  }
  switch (decision.step) {
    case CleanupStep::Done: finish(); return;
    case CleanupStep::GiveUp:
      m_stuck = decision.targets;
      finish();
      return;
    case CleanupStep::KillOthers: kill_processes(decision.targets); break;
    case CleanupStep::Kill:
      if (!m_killing_since) {
        if (m_cgroup) m_cgroup->kill();
        m_killing_since = elapsed;
        spdlog::debug("killing {} leftover process{} of the job", decision.targets.size(),
                      decision.targets.size() == 1 ? "" : "es");
      }
      kill_processes(decision.targets);
      break;
    case CleanupStep::Wait: break;
  }
  m_timer.expires_after(k_poll);
  m_timer.async_wait([this](boost::system::error_code ec) {
    if (!ec) tick();
  });
}

void LeftoverSweeper::finish() {
  // The killed orphans are reaped by the spawner's reap loop (they are rankrun's children as a
  // subreaper); their segments are confirmed first, while they are still zombies in /proc.
  m_shm.drain();
  const std::size_t others = m_seen.size() - m_stuck.size();
  const std::size_t segments = m_shm.remove_remembered();
  for (const auto& p : m_stuck) spdlog::error("{}", describe_unkillable(p));
  spdlog::info("{}", format_cleanup_summary(m_workers, others, segments));
  auto done = std::move(m_done);
  m_done = nullptr;
  if (done) done(!m_stuck.empty());
}

}  // namespace rankrun::launcher
