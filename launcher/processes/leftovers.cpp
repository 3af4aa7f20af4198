#include "launcher/reaper.hpp"

#include <sys/wait.h>

#include <spdlog/spdlog.h>

#include "launcher/job_cgroup.hpp"
#include "launcher/shm_tracker.hpp"

namespace rankrun::launcher {

namespace {
// /proc is read on every step; short enough that teardown stays quick, long enough that
// polling costs little on two cores.
constexpr auto k_poll = std::chrono::milliseconds(10);
}  // namespace

Reaper::Reaper(boost::asio::io_context& io, JobScope scope, JobCgroup* cgroup, ShmTracker* shm, CleanupLimits limits)
    : m_scope(std::move(scope)), m_cgroup(cgroup), m_shm(shm), m_limits(limits), m_timer(io) {}

void Reaper::sweep(std::size_t workers, std::function<void(const Outcome&)> done) {
  m_done = std::move(done);
  m_workers = workers;
  m_outcome = {};
  m_seen.clear();
  m_killing_since.reset();
  m_began = std::chrono::steady_clock::now();
  tick();
}

void Reaper::tick() {
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - m_began).count();
  const auto job = find_job_processes(m_scope);
  for (const auto& p : job) m_seen.insert(p.pid);
  const auto decision = decide_cleanup(job, elapsed, m_killing_since, m_limits);
  switch (decision.step) {
    case CleanupStep::Done:
      finish();
      return;
    case CleanupStep::GiveUp:
      m_outcome.stuck = decision.targets;
      finish();
      return;
    case CleanupStep::Kill:
      if (!m_killing_since) {
        // Segment creators must still be alive to be confirmed as the job's.
        if (m_shm) m_shm->scan_existing();
        if (m_cgroup) m_cgroup->kill();
        m_killing_since = elapsed;
        spdlog::debug("killing {} leftover process{} of the job", decision.targets.size(),
                      decision.targets.size() == 1 ? "" : "es");
      }
      kill_processes(decision.targets);
      break;
    case CleanupStep::Wait:
      break;
  }
  m_timer.expires_after(k_poll);
  m_timer.async_wait([this](boost::system::error_code ec) {
    if (!ec) tick();
  });
}

void Reaper::finish() {
  // Orphans the job left re-parented to rankrun: reap them now rather than leave zombies
  // (their segments first, while they are still in /proc).
  if (m_shm) m_shm->drain();
  while (::waitpid(-1, nullptr, WNOHANG) > 0) {
  }
  m_outcome.others = m_seen.size() - m_outcome.stuck.size();
  if (m_shm) m_outcome.segments = m_shm->remove_remembered();
  for (const auto& p : m_outcome.stuck) spdlog::error("{}", describe_unkillable(p));
  spdlog::info("{}", format_cleanup_summary(m_workers, m_outcome.others, m_outcome.segments));
  auto done = std::move(m_done);
  m_done = nullptr;
  if (done) done(m_outcome);
}

}  // namespace rankrun::launcher
