#pragma once
// Reads a node's job secret file (launcher/config/job_secret.hpp says which and what is unfit).

#include <optional>
#include <string>

#include "launcher/config/job_secret.hpp"

namespace rankrun::launcher {

/// The secret in `source`'s file. nullopt: an optional source (systemd's credential) whose
/// file does not exist. Throws LaunchError naming the file, its origin and the fix when it
/// cannot be read or is unfit (secret_file_problem()).
std::optional<std::string> read_job_secret(const SecretSource& source);

}  // namespace rankrun::launcher
