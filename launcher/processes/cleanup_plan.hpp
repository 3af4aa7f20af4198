#pragma once
// What cleanup does next, decided from a snapshot of the processes. Pure.
//
// After the workers have exited, whatever is left of the job (daemonised grandchildren,
// DataLoader workers, torch_shm_manager) is found in a snapshot and killed; a process that
// cleans up after itself (Python's resource tracker) is killed last, after a short moment in
// which it sees the others gone and does its work. What still lives once the kill deadline has
// passed is reported by pid and state. Every wait is bounded.

#include <sys/types.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "launcher/processes/proc_parse.hpp"

namespace rankrun::launcher {

/// One process in a snapshot of /proc, with what the effectful scan learned about it.
struct ProcEntry {
  ProcStat stat;
  bool marked = false;         // its environment carries the job's RANKRUN_JOB id
  bool in_job_cgroup = false;  // it is a member of the job's cgroup
};

/// The processes of the job in `all`: every descendant of `launcher` (rankrun is a child
/// subreaper, so orphans stay its descendants), every marked process and every member of the
/// job cgroup, except `launcher` itself and the `excluded` processes and their descendants
/// (the guardian).
std::vector<ProcStat> job_processes(const std::vector<ProcEntry>& all, pid_t launcher,
                                    const std::vector<pid_t>& excluded);

struct CleanupLimits {
  /// How long a process that cleans up after itself (cleans_up_after_itself) may take, once the
  /// rest are killed, before it is killed too.
  double settle_seconds = 2.0;
  /// How long after the first SIGKILL a survivor is declared unkillable.
  double kill_seconds = 3.0;
};

enum class CleanupStep {
  Done,        // nothing of the job is alive
  Wait,        // poll again later
  KillOthers,  // SIGKILL `targets`, every process but those that clean up after themselves,
               // which are left to see their clients go (no cgroup-wide kill yet)
  Kill,        // SIGKILL `targets` and the whole job cgroup
  GiveUp,      // `targets` survived SIGKILL past the deadline
};

struct CleanupDecision {
  CleanupStep step = CleanupStep::Done;
  std::vector<ProcStat> targets;
};

/// `job`: the job's processes now; `elapsed`: seconds since cleanup began; `killing_since`:
/// seconds since cleanup began at which the first SIGKILL went out, if one did.
CleanupDecision decide_cleanup(const std::vector<ProcStat>& job, double elapsed, std::optional<double> killing_since,
                               const CleanupLimits& limits);

/// True for the processes worth the settle time: Python's multiprocessing resource tracker. It
/// ignores SIGTERM and unlinks the named semaphores and shared memory its processes left
/// (`/dev/shm/sem.mp-*`, `psm_*`: names after no process, so rankrun cannot tell them from
/// another job's) once the last holder of its pipe is gone; killed first, it would leave them.
/// torch_shm_manager is not one: it holds the tracker's pipe, and the segments it would unlink
/// are named after their creator, so rankrun removes them itself.
bool cleans_up_after_itself(const ProcStat& p);

/// Whether a /proc/PID/cmdline (arguments separated by NULs) is Python's resource tracker:
/// `python3 [flags] -c 'from multiprocessing.resource_tracker import main;main(FD)'`.
bool is_python_resource_tracker(std::string_view cmdline);

/// "pid 4242 (worker_helper) could not be killed: it is in state D (disk sleep); the host needs attention"
std::string describe_unkillable(const ProcStat& p);

/// "cleanup: reaped 2 workers and 3 other processes, removed 4 shared-memory segments"
std::string format_cleanup_summary(std::size_t workers, std::size_t others, std::size_t segments);

}  // namespace rankrun::launcher
