#pragma once
// The node's GPUs checked through NVML, as the job needs it: before the first attempt (held by
// others, unfit), before every restart (the last attempt's memory released, then held by
// others), and for the failure report (what NVML says of the root-cause rank's GPU now).
// The rules are gpu_health.hpp's; this reads NVML and /proc.

#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "launcher/config/options.hpp"
#include "launcher/gpu/gpu_health.hpp"
#include "launcher/gpu/nvml.hpp"
#include "launcher/processes/proc_scan.hpp"

namespace rankrun::launcher::gpu {

/// What /proc says of `pid`; `scope` (may be null) decides whether it is the job's.
ProcessFacts read_process_facts(pid_t pid, const JobScope* scope);

/// The user rankrun runs as, by name.
std::string current_user();

/// "node 1 (gpu-07): " on a node of several, else "".
std::string node_prefix(const LaunchConfig& config);

/// Before anything starts: the GPUs this node gives its ranks, checked (held by others, unfit).
/// Empty when the job has no GPUs, --gpu-check=off, or NVML is absent.
std::vector<Finding> check_node_gpus(const LaunchConfig& config, const EnvMap& env);

/// The findings as console lines: "GPU 0: <detail>; <fix>".
std::vector<std::string> finding_lines(const std::vector<Finding>& findings);

class GpuGuard {
 public:
  /// Reads nothing until asked. NVML is opened once, here; without it every call is a no-op.
  GpuGuard(boost::asio::io_context& io, const LaunchConfig& config, const EnvMap& env, JobScope scope);
  ~GpuGuard();

  /// Before a restart: waits (polling NVML, bounded by --gpu-release-timeout, said on the
  /// console) until the GPUs no longer list a process of the ended attempt (`attempt`: its
  /// workers' pids) or of the job, or one that exited; then warns of processes of others there.
  /// `done(true)`: memory was still held at the deadline (each holder logged with pid and state).
  void await_release(std::set<pid_t> attempt, std::function<void(bool stuck)> done);
  /// What NVML says of GPU `id` now when it is unfit ("" lines when it is fine or unknown).
  std::vector<std::string> unfit_now(const std::string& id) const;
  /// The GPU memory each process holds on the job's GPUs now (empty without NVML).
  std::map<pid_t, std::uint64_t> memory_by_pid() const;
  /// A stop signal came: a wait in progress ends now, as if the memory were released.
  void cut_short();
  void close();

 private:
  void poll();

  LaunchConfig const& m_config;
  std::unique_ptr<Nvml> m_nvml;
  JobScope m_scope;
  boost::asio::steady_timer m_timer;
  std::set<pid_t> m_attempt;
  std::function<void(bool)> m_done;
  std::chrono::steady_clock::time_point m_began;
  std::chrono::steady_clock::time_point m_said;
  bool m_waiting_said = false;
};

}  // namespace rankrun::launcher::gpu
