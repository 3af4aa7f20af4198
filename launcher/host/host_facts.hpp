#pragma once
// Gathers HostFacts from the running system (environment, CPUs; the GPU count from gpu/).

#include <functional>
#include <string_view>

#include "launcher/config/options.hpp"

namespace rankrun::launcher {

/// The launcher's environment as a map.
EnvMap current_environment();

/// A fresh random id in uuid4 text form, for --standalone's run id.
std::string random_run_id();

/// The variable in which `python -m rankrun` (packaging/python/rankrun/__main__.py) hands rankrun
/// its interpreter (sys.executable); the workers do not get it.
inline constexpr std::string_view k_launcher_python_var = "RANKRUN_LAUNCHER_PYTHON";

/// The facts `resolve()` needs; `count_gpus` (gpu::count_nvidia_gpus, a room above) is asked
/// only when set and CUDA_VISIBLE_DEVICES is not. `invoked_as`: rankrun's argv[0].
HostFacts gather_host_facts(const EnvMap& env, const std::function<int()>& count_gpus, const std::string& invoked_as);

/// A short command's result: pclose()'s status (-1: it could not be run) and its output.
struct CommandResult {
  int status = -1;
  std::string output;
};
/// Runs `command` with /bin/sh and reads its stdout to the end (a command writing more never
/// blocks on a full pipe), keeping the first `max_output` bytes.
CommandResult run_shell(const std::string& command, std::size_t max_output);

/// Every address `name` resolves to, numeric; empty when it does not resolve.
std::vector<std::string> resolve_all(const std::string& name);
/// This machine's interface addresses (getifaddrs), numeric, IPv6 without a zone.
std::vector<std::string> local_interface_addresses();
/// This machine's names: its host name, its canonical name, "localhost".
std::vector<std::string> local_host_names();

/// The address the other machines know this one by: its host name's, when that is not loopback
/// (a pod's hosts file names its own address), else its first interface address that is not
/// loopback or link-local; "" when it has none.
std::string this_machine_address();

/// The name the other machines know this one by: its host name's canonical name (as Python's
/// getfqdn()) when that resolves to an address that is not loopback, else this_machine_address().
std::string this_machine_name();

/// The address `name` resolves to, numeric (an IPv4 one when it has both), or "" with `why` set.
std::string resolve_address(const std::string& name, std::string& why);

}  // namespace rankrun::launcher
