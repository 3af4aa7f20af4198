#pragma once
// Ends whatever is left of an attempt once its workers have exited: daemonised grandchildren,
// DataLoader workers, torch_shm_manager, and the shared-memory segments the job made.
// AttemptCleanup is what the Job needs; LeftoverSweeper is the real one: it polls /proc on a
// short timer, decide_cleanup() says what to do at each step, and every wait is bounded.

#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <functional>
#include <optional>
#include <set>
#include <vector>

#include "launcher/processes/cleanup_plan.hpp"
#include "launcher/processes/proc_scan.hpp"
#include "launcher/processes/shm_tracker.hpp"

namespace rankrun::launcher {

class JobCgroup;
class Guardian;

class AttemptCleanup {
 public:
  virtual ~AttemptCleanup() = default;
  /// Ends what is left of the attempt, then calls `done` with true when some process could not
  /// be killed.
  virtual void clean_up(std::size_t workers, std::function<void(bool unkillable)> done) = 0;
  /// The job is over: stop watching (so that io_context::run() can return).
  virtual void close() = 0;
};

class LeftoverSweeper final : public AttemptCleanup {
 public:
  /// `shm_watch`: ShmTracker::open_watch()'s fd (owned from now on; -1: none). The segments
  /// the job makes are reported to `guardian` (may be null), which removes them if rankrun dies.
  LeftoverSweeper(boost::asio::io_context& io, JobScope scope, JobCgroup* cgroup, int shm_watch, Guardian* guardian,
                  CleanupLimits limits = {});

  void clean_up(std::size_t workers, std::function<void(bool unkillable)> done) override;
  void close() override;
  /// Handles the segment creations already queued; called before each reap, while exited
  /// children are still zombies (their pids can still be confirmed as the job's).
  void drain_segments() { m_shm.drain(); }

 private:
  void tick();
  void finish();

  JobScope m_scope;
  JobCgroup* m_cgroup;
  ShmTracker m_shm;
  CleanupLimits m_limits;
  boost::asio::steady_timer m_timer;
  std::chrono::steady_clock::time_point m_began;
  std::optional<double> m_killing_since;
  bool m_scanned = false;  // the segments already there were read (before their creators die)
  std::set<pid_t> m_seen;
  std::size_t m_workers = 0;
  std::vector<ProcStat> m_stuck;
  std::function<void(bool)> m_done;
};

}  // namespace rankrun::launcher
