#pragma once
// What cleanup does next, decided from a snapshot of the processes. Pure.
//
// After the workers have exited, whatever is left of the job (daemonised grandchildren,
// DataLoader workers, torch_shm_manager) is found in a snapshot, given a short moment when a
// process that cleans up after itself is among them, then killed, and reported by pid and
// state if it still lives once the kill deadline has passed. Every wait is bounded.

#include <sys/types.h>

#include <optional>
#include <string>
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
  /// How long a process that cleans up after itself (torch_shm_manager unlinks its segments
  /// once its clients are gone) may take before it is killed.
  double settle_seconds = 1.0;
  /// How long after the first SIGKILL a survivor is declared unkillable.
  double kill_seconds = 3.0;
};

enum class CleanupStep {
  Done,    // nothing of the job is alive
  Wait,    // poll again later
  Kill,    // SIGKILL `targets` (their process groups too)
  GiveUp,  // `targets` survived SIGKILL past the deadline
};

struct CleanupDecision {
  CleanupStep step = CleanupStep::Done;
  std::vector<ProcStat> targets;
};

/// `job`: the job's processes now; `elapsed`: seconds since cleanup began; `killing_since`:
/// seconds since cleanup began at which the first SIGKILL went out, if one did.
CleanupDecision decide_cleanup(const std::vector<ProcStat>& job, double elapsed, std::optional<double> killing_since,
                               const CleanupLimits& limits);

/// True for the processes worth the settle time: torch_shm_manager (its name as the kernel
/// truncates it to 15 bytes).
bool cleans_up_after_itself(const ProcStat& p);

/// "pid 4242 (worker_helper) could not be killed: it is in state D (disk sleep); the host needs attention"
std::string describe_unkillable(const ProcStat& p);

/// "cleanup: reaped 2 workers and 3 other processes, removed 4 shared-memory segments"
std::string format_cleanup_summary(std::size_t workers, std::size_t others, std::size_t segments);

}  // namespace rankrun::launcher
