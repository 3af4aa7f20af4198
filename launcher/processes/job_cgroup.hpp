#pragma once
// A cgroup v2 for one job, where the machine lets rankrun make one: every worker moves itself
// in before exec, its descendants follow whatever they do (setsid, double fork), and
// cgroup.kill ends them all at once. rankrun itself stays outside.

#include <sys/types.h>

#include <memory>
#include <string>

#include "base/unique_fd.hpp"

namespace rankrun::launcher {

class JobCgroup {
 public:
  /// Makes "rankrun-<job_id>" below rankrun's own cgroup in the unified hierarchy (found from
  /// /proc/self/mounts). nullptr, with the reason logged at debug level, when there is no
  /// cgroup2 mount or no permission; cleanup then walks the process tree instead. In a systemd
  /// service with Delegate=yes rankrun first moves itself into the leaf "<own>/supervisor" (cgroup
  /// v2: no processes in an inner cgroup), and the job's cgroup is "<own>/rankrun-<job_id>".
  static std::unique_ptr<JobCgroup> create(const std::string& job_id);
  /// Removes the cgroup (it must be empty by then; a bounded wait covers exiting tasks).
  ~JobCgroup();
  JobCgroup(const JobCgroup&) = delete;
  JobCgroup& operator=(const JobCgroup&) = delete;

  /// An O_WRONLY, O_CLOEXEC fd of cgroup.procs; a child writes "0" to it to move itself in.
  int procs_fd() const { return m_procs.get(); }
  /// The absolute directory, and the path as /proc/PID/cgroup shows it.
  const std::string& dir() const { return m_dir; }
  const std::string& path() const { return m_path; }

  /// Writes cgroup.kill; false when it could not (a kernel before 5.14).
  bool kill() const;

 private:
  JobCgroup(std::string dir, std::string path, UniqueFd procs)
      : m_dir(std::move(dir)), m_path(std::move(path)), m_procs(std::move(procs)) {}

  std::string m_dir;
  std::string m_path;
  UniqueFd m_procs;
};

/// The cgroup operations the guardian needs after fork, without the owning object.
bool cgroup_kill(const std::string& dir);
/// rmdir, retried while it is still populated, for at most `seconds`.
bool cgroup_remove(const std::string& dir, double seconds);

}  // namespace rankrun::launcher
