#pragma once
// Parsers for the text the kernel publishes under /proc: a process's stat line, its initial
// environment, its cgroup membership, and the mount table. Pure: the caller reads the files.

#include <sys/types.h>

#include <optional>
#include <string>
#include <string_view>

namespace rankrun::launcher {

/// The fields of /proc/PID/stat that cleanup needs.
struct ProcStat {
  pid_t pid = 0;
  std::string comm;  // at most 15 bytes, as the kernel truncates it
  char state = '?';  // R S D Z T t X I ...
  pid_t ppid = 0;
  pid_t pgrp = 0;
  pid_t session = 0;
  unsigned long long start_time = 0;  // clock ticks after boot
  unsigned long long cpu_ticks = 0;   // utime + stime: its CPU time, all threads, in clock ticks
  /// Not in /proc/PID/stat: set by the job scan from its command line (is_python_resource_tracker).
  bool resource_tracker = false;

  /// A zombie (or a task being torn down) has released everything but its pid.
  bool dead() const { return state == 'Z' || state == 'X' || state == 'x'; }
};

/// Parses one /proc/PID/stat line. The command name may hold spaces and parentheses, so it
/// ends at the last ')'.
std::optional<ProcStat> parse_proc_stat(std::string_view text);

/// Who a process is, from /proc/PID/status.
struct ProcIdentity {
  std::optional<uid_t> uid;      // its owner, the real uid ("Uid:", the first)
  std::optional<uid_t> fsuid;    // the uid the files it creates get ("Uid:", the fourth)
  std::optional<pid_t> own_pid;  // its pid in its own pid namespace ("NStgid:", the last)
  int pid_ns_depth = 0;          // how many pid namespaces "NStgid:" lists (0: no such line)
};

/// Parses /proc/PID/status (a zombie's too); what is missing stays unset.
ProcIdentity parse_proc_status(std::string_view text);

/// "disk sleep" for 'D', as /proc/PID/status names the states.
std::string describe_proc_state(char state);

/// Every process of a job inherits RANKRUN_JOB. A rankrun started inside another job appends
/// its own id, so the variable holds a ':'-separated list of the ids the process belongs to.
inline constexpr std::string_view k_job_marker_var = "RANKRUN_JOB";

/// The value a worker gets: `inherited` (the launcher's own RANKRUN_JOB, if any) plus `id`.
std::string job_marker_value(const std::optional<std::string>& inherited, std::string_view id);

/// True when the NUL-separated environment block `environ` (/proc/PID/environ) carries `id`
/// in RANKRUN_JOB.
bool environ_has_job(std::string_view environ, std::string_view id);

/// The cgroup2 mount point from /proc/self/mounts, octal escapes decoded.
std::optional<std::string> cgroup2_mount_point(std::string_view mounts);

/// The unified-hierarchy path ("0::/a/b" -> "/a/b") from /proc/PID/cgroup.
std::optional<std::string> cgroup2_path(std::string_view proc_cgroup);

}  // namespace rankrun::launcher
