#pragma once
// Finds and kills the processes of a job by reading /proc. Shared by rankrun's own cleanup and
// by the guardian that cleans up when rankrun itself is killed.

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "launcher/processes/cleanup_plan.hpp"
#include "launcher/processes/proc_parse.hpp"

namespace rankrun::launcher {

/// Who belongs to a job.
struct JobScope {
  pid_t launcher = -1;          // rankrun (a child subreaper); -1 once it is gone
  std::vector<pid_t> excluded;  // the guardian
  std::string job_id;           // the RANKRUN_JOB id
  std::string cgroup_path;      // the job cgroup as /proc/PID/cgroup shows it; empty: none
  std::string cgroup_dir;       // the same cgroup's directory; empty: /proc is read whole
  bool scan_markers = false;    // read every process's environment for the id (costlier)
};

/// A fresh random job id (16 hex digits).
std::string make_job_id();

std::optional<ProcStat> read_proc_stat(pid_t pid);

/// Every process visible in /proc now.
std::vector<ProcStat> read_all_proc_stats();

/// `root` and every process below it (itself first), from one scan of /proc.
std::vector<pid_t> process_tree(pid_t root);

/// Every pid in the cgroup directory `dir` and the cgroups below it (cgroup.procs); nullopt
/// when `dir`'s own list cannot be read.
std::optional<std::vector<pid_t>> cgroup_subtree_pids(const std::string& dir);

/// The processes of the job now. With a cgroup directory and no marker scan, only the job's
/// own processes are read (the cgroup's members and the launcher's descendants), not every
/// process of the host: a sweep then costs the same on a host running thousands of processes.
std::vector<ProcStat> find_job_processes(const JobScope& scope);

/// True while `pid` is alive and belongs to the job: in its cgroup, a descendant of the
/// launcher, or carrying its id.
bool belongs_to_job(pid_t pid, const JobScope& scope);

/// SIGKILL to each of `targets`, unless its pid now names a different process (its start time
/// changed).
void kill_processes(const std::vector<ProcStat>& targets);

}  // namespace rankrun::launcher
