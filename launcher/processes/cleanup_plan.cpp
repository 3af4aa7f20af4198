#include "launcher/processes/cleanup_plan.hpp"

#include <algorithm>
#include <deque>
#include <map>
#include <set>

namespace rankrun::launcher {

std::vector<ProcStat> job_processes(const std::vector<ProcEntry>& all, pid_t launcher,
                                    const std::vector<pid_t>& excluded) {
  std::multimap<pid_t, const ProcEntry*> children;
  for (const auto& e : all) children.emplace(e.stat.ppid, &e);
  std::set<pid_t> skip(excluded.begin(), excluded.end());
  skip.insert(launcher);
  // The excluded processes' own descendants are not the job's either.
  std::deque<pid_t> queue(excluded.begin(), excluded.end());
  while (!queue.empty()) {
    const pid_t p = queue.front();
    queue.pop_front();
    auto [lo, hi] = children.equal_range(p);
    for (auto it = lo; it != hi; ++it) {
      if (skip.insert(it->second->stat.pid).second) queue.push_back(it->second->stat.pid);
    }
  }

  std::set<pid_t> in_job;
  queue.assign(1, launcher);
  while (!queue.empty()) {
    const pid_t p = queue.front();
    queue.pop_front();
    auto [lo, hi] = children.equal_range(p);
    for (auto it = lo; it != hi; ++it) {
      const pid_t child = it->second->stat.pid;
      if (!skip.count(child) && in_job.insert(child).second) queue.push_back(child);
    }
  }
  for (const auto& e : all) {
    if ((e.marked || e.in_job_cgroup) && !skip.count(e.stat.pid)) in_job.insert(e.stat.pid);
  }

  std::vector<ProcStat> out;
  for (const auto& e : all) {
    if (in_job.count(e.stat.pid)) out.push_back(e.stat);
  }
  return out;
}

bool cleans_up_after_itself(const ProcStat& p) { return p.resource_tracker; }

bool is_python_resource_tracker(std::string_view cmdline) {
  // Its arguments: the interpreter, its flags, then "-c" and the one line it runs.
  std::size_t start = 0;
  bool after_c = false;
  while (start < cmdline.size()) {
    auto end = cmdline.find('\0', start);
    if (end == std::string_view::npos) end = cmdline.size();
    const auto arg = cmdline.substr(start, end - start);
    if (after_c) return arg.rfind("from multiprocessing.resource_tracker import main;", 0) == 0;
    after_c = arg == "-c";
    start = end + 1;
  }
  return false;
}

CleanupDecision decide_cleanup(const std::vector<ProcStat>& job, double elapsed, std::optional<double> killing_since,
                               const CleanupLimits& limits) {
  CleanupDecision d;
  for (const auto& p : job) {
    if (!p.dead()) d.targets.push_back(p);
  }
  if (d.targets.empty()) {
    d.step = CleanupStep::Done;
    return d;
  }
  if (!killing_since) {
    const bool someone_cleans_up = std::any_of(d.targets.begin(), d.targets.end(), cleans_up_after_itself);
    if (someone_cleans_up && elapsed < limits.settle_seconds) {
      // The others go first (again on every round: one may have forked); those that clean up
      // see their last client gone, do their work and exit, or are killed at the settle time.
      std::erase_if(d.targets, cleans_up_after_itself);
      d.step = d.targets.empty() ? CleanupStep::Wait : CleanupStep::KillOthers;
      return d;
    }
    d.step = CleanupStep::Kill;
    return d;
  }
  // SIGKILL again on every round: a process found only now (forked before it died) needs it too.
  d.step = elapsed - *killing_since < limits.kill_seconds ? CleanupStep::Kill : CleanupStep::GiveUp;
  return d;
}

std::string describe_unkillable(const ProcStat& p) {
  return "pid " + std::to_string(p.pid) + " (" + p.comm + ") could not be killed: it is in state " + p.state + " (" +
         describe_proc_state(p.state) + "); the host needs attention";
}

std::string format_cleanup_summary(std::size_t workers, std::size_t others, std::size_t segments) {
  auto plural = [](std::size_t n, const char* one, const char* many) {
    return std::to_string(n) + " " + (n == 1 ? one : many);
  };
  return "cleanup: reaped " + plural(workers, "worker", "workers") + " and " +
         plural(others, "other process", "other processes") + ", removed " +
         plural(segments, "shared-memory segment", "shared-memory segments");
}

}  // namespace rankrun::launcher
