#pragma once
// The only file that includes CLI11: argv -> LaunchOptions, torchrun-compatible.

#include <optional>
#include <string>

#include "launcher/config/options.hpp"
#include "launcher/observe/status_client.hpp"

namespace rankrun::launcher {

/// The outcome of parsing: options to run, a question to a running job (`rankrun status`), or an
/// exit code (after --help, --version or an error, whose text has already been printed).
struct CliResult {
  std::optional<LaunchOptions> options;
  int exit_code = 0;
  std::optional<observe::StatusRequest> status;
};

/// Parses `argv`. Every option falls back to PET_<NAME> (torchrun's) or RANKRUN_<NAME>
/// (rankrun's own) from `env` when not given on the command line. `status` as the first
/// argument is the status subcommand (anywhere else it is a script's name); it reads no
/// environment.
CliResult parse_cli(int argc, const char* const* argv, const EnvMap& env);

/// The completion script of `shell` (bash, zsh or tcsh), packaging/completion/rankrun.<shell>,
/// built into the executable (--print-completion).
std::string completion_script(const std::string& shell);

}  // namespace rankrun::launcher
