#pragma once
// `rankrun --check`: with the flags of a launch, start nothing and say whether the launch would
// work here, one line per check with the fix for each failure. Pure: what the checks conclude
// from facts about the host (gathered by probe.hpp), and how the lines read.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "launcher/config/options.hpp"
#include "launcher/files/dir_trust.hpp"
#include "launcher/gpu/gpu_health.hpp"

namespace rankrun::launcher::check {

enum class Verdict { Pass, Warn, Fail };

struct CheckLine {
  Verdict verdict = Verdict::Pass;
  std::string what;    // "GPUs", "store 10.0.0.1:29500"
  std::string detail;  // what was found
  std::string fix;     // for Warn and Fail: what to do
};

/// Facts about this host, as the probes found them.
struct HostProbe {
  // The store: bound here (node 0) or reached from here (other nodes).
  bool store_local = true;
  std::optional<std::string> store_error;  // empty: bindable / reachable
  // The master address.
  std::optional<std::string> master_resolved;  // the address it resolves to
  std::string master_error;
  // /dev/shm
  std::optional<std::uint64_t> shm_size;  // bytes; nullopt: not mounted
  std::uint64_t shm_free = 0;
  // RLIMIT_NOFILE
  std::uint64_t nofile_soft = 0;
  std::uint64_t nofile_hard = 0;
  // The listen backlog a store here gets (net.core.somaxconn caps it) and the half-open
  // connections the kernel keeps (net.ipv4.tcp_max_syn_backlog); nullopt: unreadable.
  std::optional<std::uint64_t> somaxconn;
  std::optional<std::uint64_t> syn_backlog;
  // NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME: (variable, value, interfaces that match and are up,
  // interfaces that exist)
  struct Ifname {
    std::string variable;
    std::string value;
    std::vector<std::string> up;
    std::vector<std::string> all;
  };
  std::vector<Ifname> ifnames;
  // The workers' Python: its path, and the torch version it imports (or why not).
  bool python = true;  // false: not checked (not a Python job, or the quick checks at start)
  std::string interpreter;
  std::optional<std::string> torch_version;
  /// Whether that torch has a libuv TCPStore (2.4+ ask for one by default); nullopt: the
  /// question does not arise (before 2.4) or could not be answered.
  std::optional<bool> torch_libuv;
  std::string python_error;
  // RemoveIPC: the user, whether it is a system user, whether lingering is on, and logind's
  // RemoveIPC setting.
  std::string user;
  bool system_user = true;
  bool linger = false;
  bool remove_ipc = true;
  bool under_logind = false;  // a session exists for the user (RemoveIPC applies)
  // Write access.
  std::optional<std::string> cgroup_error;  // nullopt: rankrun can make its job cgroup
  bool cgroup_available = false;
  std::optional<std::string> log_dir_error;  // nullopt: writable (or no --log-dir)
  /// Why the run directory's place (--log-dir, else $TMPDIR, else /tmp) lets another user in
  /// (files/dir_trust.hpp); nullopt: it keeps them out.
  std::optional<DirProblem> run_dir_place;
  // The GPUs through NVML: what the GPU check found (held by others, unfit, advice), and how
  // many GPUs it read; nullopt: not read (why in gpu_unread; empty: no GPUs or --gpu-check=off).
  std::vector<gpu::Finding> gpu_findings;
  std::optional<std::size_t> gpus_read;
  std::string gpu_unread;
};

/// The checks for `config` on a host described by `probe`, in a fixed order.
std::vector<CheckLine> evaluate(const LaunchConfig& config, const HostProbe& probe);

/// The lines, ✓/!/✗ when `fancy` (a terminal), else "ok"/"warn"/"FAIL"; each failure and
/// warning followed by its fix. Ends with a summary line.
std::string format_checks(const std::vector<CheckLine>& lines, bool fancy);

/// 0 when nothing failed (warnings allowed), 2 otherwise.
int exit_code_of(const std::vector<CheckLine>& lines);

}  // namespace rankrun::launcher::check
