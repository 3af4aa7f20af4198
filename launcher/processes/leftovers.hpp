#pragma once
// Ends whatever is left of a job once its workers have exited: daemonised grandchildren,
// DataLoader workers, torch_shm_manager. Runs on the supervisor's io_context, polling /proc on
// a short timer; decide_cleanup() says what to do at each step, and every wait is bounded.

#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <functional>
#include <optional>
#include <set>
#include <vector>

#include "launcher/cleanup_plan.hpp"
#include "launcher/proc_scan.hpp"

namespace rankrun::launcher {

class JobCgroup;
class ShmTracker;

class Reaper {
 public:
  struct Outcome {
    std::size_t others = 0;    // processes of the job other than the workers that ended
    std::size_t segments = 0;  // shared-memory segments removed
    std::vector<ProcStat> stuck;
  };

  Reaper(boost::asio::io_context& io, JobScope scope, JobCgroup* cgroup, ShmTracker* shm, CleanupLimits limits = {});

  /// Kills what is left of the job, removes its segments, logs the one-line summary (info)
  /// and any process that survived SIGKILL (error), then calls `done`.
  void sweep(std::size_t workers, std::function<void(const Outcome&)> done);

 private:
  void tick();
  void finish();

  JobScope m_scope;
  JobCgroup* m_cgroup;
  ShmTracker* m_shm;
  CleanupLimits m_limits;
  boost::asio::steady_timer m_timer;
  std::chrono::steady_clock::time_point m_began;
  std::optional<double> m_killing_since;
  std::set<pid_t> m_seen;
  std::size_t m_workers = 0;
  Outcome m_outcome;
  std::function<void(const Outcome&)> m_done;
};

}  // namespace rankrun::launcher
