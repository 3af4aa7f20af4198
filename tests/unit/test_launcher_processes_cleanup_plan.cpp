#include <doctest/doctest.h>

#include <algorithm>

#include "launcher/processes/cleanup_plan.hpp"

using namespace rankrun::launcher;

namespace {

ProcEntry proc(pid_t pid, pid_t ppid, const char* comm = "x", char state = 'S') {
  ProcEntry e;
  e.stat.pid = pid;
  e.stat.ppid = ppid;
  e.stat.comm = comm;
  e.stat.state = state;
  return e;
}

std::vector<pid_t> pids(const std::vector<ProcStat>& v) {
  std::vector<pid_t> out;
  for (const auto& p : v) out.push_back(p.pid);
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<ProcStat> stats(std::initializer_list<ProcEntry> entries) {
  std::vector<ProcStat> out;
  for (const auto& e : entries) out.push_back(e.stat);
  return out;
}

}  // namespace

TEST_CASE("the job is rankrun's descendants, marked processes and cgroup members, minus the guardian") {
  auto marked = proc(70, 1);
  marked.marked = true;
  auto member = proc(80, 1);
  member.in_job_cgroup = true;
  const std::vector<ProcEntry> all = {
      proc(1, 0),   proc(10, 1),   // init, rankrun
      proc(11, 10), proc(12, 11),  // worker and its child
      proc(13, 10),                // an orphan re-parented to rankrun
      proc(20, 10), proc(21, 20),  // the guardian and a child of it
      proc(30, 1),  proc(31, 30),  // someone else's
      marked,       member,
  };
  CHECK(pids(job_processes(all, 10, {20})) == std::vector<pid_t>{11, 12, 13, 70, 80});
}

TEST_CASE("the guardian's view: no launcher, markers and cgroup only") {
  auto marked = proc(70, 1);
  marked.marked = true;
  auto guardian = proc(20, 1);
  guardian.marked = true;  // a nested rankrun's guardian carries the outer id; its own is excluded
  CHECK(pids(job_processes({proc(1, 0), proc(30, 1), marked, guardian}, -1, {20})) == std::vector<pid_t>{70});
}

TEST_CASE("nothing alive: done; zombies count as dead") {
  CHECK(decide_cleanup({}, 0, std::nullopt, {}).step == CleanupStep::Done);
  CHECK(decide_cleanup(stats({proc(5, 1, "x", 'Z')}), 0, std::nullopt, {}).step == CleanupStep::Done);
}

TEST_CASE("a leftover daemon is killed at once") {
  const auto d = decide_cleanup(stats({proc(5, 1, "daemon"), proc(6, 1, "gone", 'Z')}), 0, std::nullopt, {});
  CHECK(d.step == CleanupStep::Kill);
  CHECK(pids(d.targets) == std::vector<pid_t>{5});
}

TEST_CASE("Python's resource tracker is killed last: the others first, then it gets the settle time") {
  auto tracker = proc(5, 1, "python3");
  tracker.stat.resource_tracker = true;
  const auto job = stats({tracker, proc(6, 1, "torch_shm_manag"), proc(7, 1, "python3")});
  CleanupLimits limits;
  limits.settle_seconds = 2.0;
  auto d = decide_cleanup(job, 0, std::nullopt, limits);
  CHECK(d.step == CleanupStep::KillOthers);
  CHECK(pids(d.targets) == std::vector<pid_t>{6, 7});
  // the others gone: it is waited for
  CHECK(decide_cleanup(stats({tracker}), 0.5, std::nullopt, limits).step == CleanupStep::Wait);
  // at the settle time everything left is killed, the tracker too
  d = decide_cleanup(job, 2.0, std::nullopt, limits);
  CHECK(d.step == CleanupStep::Kill);
  CHECK(pids(d.targets) == std::vector<pid_t>{5, 6, 7});
  // without one, torch_shm_manager is killed at once with the rest
  d = decide_cleanup(stats({proc(6, 1, "torch_shm_manag"), proc(7, 1, "daemon")}), 0, std::nullopt, limits);
  CHECK(d.step == CleanupStep::Kill);
  CHECK(pids(d.targets) == std::vector<pid_t>{6, 7});
}

TEST_CASE("Python's resource tracker, by its command line") {
  using namespace std::string_literals;
  CHECK(is_python_resource_tracker(
      "/usr/bin/python3\0-B\0-c\0from multiprocessing.resource_tracker import main;main(3)\0"s));
  CHECK(is_python_resource_tracker("python3.11\0-c\0from multiprocessing.resource_tracker import main;main(12)"s));
  // the forkserver, a script that mentions it, a -c of something else
  CHECK_FALSE(is_python_resource_tracker(
      "/usr/bin/python3\0-B\0-c\0import sys; from multiprocessing.forkserver import main; main(8, 9)\0"s));
  CHECK_FALSE(is_python_resource_tracker("python3\0train.py\0from multiprocessing.resource_tracker import main;\0"s));
  CHECK_FALSE(is_python_resource_tracker("python3\0-c\0"s));
  CHECK_FALSE(is_python_resource_tracker(""));
}

TEST_CASE("survivors of SIGKILL are killed again until the deadline, then reported") {
  CleanupLimits limits;
  limits.kill_seconds = 3.0;
  const auto job = stats({proc(5, 1, "stuck", 'D')});
  CHECK(decide_cleanup(job, 2.0, 0.5, limits).step == CleanupStep::Kill);
  const auto d = decide_cleanup(job, 3.5, 0.5, limits);
  CHECK(d.step == CleanupStep::GiveUp);
  CHECK(pids(d.targets) == std::vector<pid_t>{5});
  CHECK(describe_unkillable(d.targets.front()) ==
        "pid 5 (stuck) could not be killed: it is in state D (disk sleep); the host needs attention");
}

TEST_CASE("the cleanup summary line") {
  CHECK(format_cleanup_summary(2, 3, 4) ==
        "cleanup: reaped 2 workers and 3 other processes, removed 4 shared-memory segments");
  CHECK(format_cleanup_summary(1, 1, 1) ==
        "cleanup: reaped 1 worker and 1 other process, removed 1 shared-memory segment");
}
