#pragma once
// The guardian: a small process forked when rankrun starts that cleans up the job if rankrun
// dies without doing so itself (SIGKILL, a crash, the OOM killer).
//
// It sits in its own session, blocked reading a pipe whose write end only rankrun holds.
// rankrun sends it the names of the job's shared-memory segments as it learns them and, once
// it has cleaned up, "done". End of file without "done" means rankrun is gone: the guardian
// kills the job (cgroup.kill, else every process carrying the job's RANKRUN_JOB id), removes
// the segments it was told about and those whose creator it finds alive in the job, removes
// the job cgroup and rankrun's private run directory, and exits. It is forked before rankrun opens any socket or starts any
// thread, so it holds no port and may use plain blocking calls.

#include <sys/types.h>

#include <memory>
#include <string>

#include "base/unique_fd.hpp"

namespace rankrun::launcher {

struct GuardianPlan {
  std::string job_id;
  std::string cgroup_dir;   // empty: no job cgroup
  std::string cgroup_path;  // as /proc/PID/cgroup shows it
  std::string shm_dir = "/dev/shm";
  /// rankrun's private run directory (absolute), removed with the rest; empty: none, or kept.
  std::string private_dir;
  /// An fd the guardian keeps open until it exits (rankrun's inotify instance): the kernel's
  /// teardown of an inotify instance waits for a grace period (milliseconds), and it then
  /// happens in the guardian's exit instead of delaying rankrun's. -1: none.
  int keep_fd = -1;
};

class Guardian {
 public:
  /// Forks the guardian; nullptr (logged) when fork fails.
  static std::unique_ptr<Guardian> start(const GuardianPlan& plan);
  /// Without release(), closing the pipe asks the guardian to clean up (rankrun's error paths).
  ~Guardian() = default;
  Guardian(const Guardian&) = delete;
  Guardian& operator=(const Guardian&) = delete;

  pid_t pid() const { return m_pid; }
  void remember_segment(const std::string& name, ino_t inode);
  /// The job is cleaned up: the guardian exits quietly; reaped within a bounded wait.
  void release();

 private:
  Guardian(pid_t pid, UniqueFd pipe) : m_pid(pid), m_pipe(std::move(pipe)) {}

  pid_t m_pid;
  UniqueFd m_pipe;
};

}  // namespace rankrun::launcher
