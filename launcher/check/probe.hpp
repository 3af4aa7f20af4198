#pragma once
// The effects behind `rankrun --check`: it looks at this host (sockets, /dev/shm, limits,
// interfaces, the workers' Python, logind, cgroups) and starts nothing that outlives it.

#include "launcher/check/preflight.hpp"

namespace rankrun::launcher::check {

/// `python`: the workers run a Python interpreter (config.command[0]) and it is tried; `store`:
/// the store's address is bound or connected to.
HostProbe probe_host(const LaunchConfig& config, const EnvMap& env, bool python, bool store = true);

/// The quick checks every node of a multi-node job runs at start (no store, no Python): the
/// failures, formatted, or "" when none failed.
std::string node_start_failures(const LaunchConfig& config, const EnvMap& env);

/// Probes, evaluates and prints; returns rankrun's exit code (0 or 2).
int run_checks(const LaunchConfig& config, const EnvMap& env, bool python);

}  // namespace rankrun::launcher::check
