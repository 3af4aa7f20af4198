#pragma once
// Applies a Slurm job step's configuration (slurm.hpp) to the options the user did not give,
// resolving node 0's host name: through the resolver, else through Slurm's own NodeAddr
// (`scontrol show node NAME`), which test clusters and some sites use instead of DNS.

#include "launcher/config/options.hpp"

namespace rankrun::launcher {

/// Throws LaunchError for a wrong set-up or a host that cannot be resolved. Returns the job's
/// id when inside Slurm ("" otherwise). With `verbose`, prints where each value came from.
std::string apply_slurm(LaunchOptions& options, const EnvMap& env);

}  // namespace rankrun::launcher
