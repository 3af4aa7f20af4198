#pragma once
// `rankrun status [--json] [DIR]`: finds the running job's rankrun on this machine (its status
// socket in its run directory) and prints what it answers. cli/ reads the command line.

#include <optional>
#include <string>

namespace rankrun::launcher::observe {

/// What `rankrun status` is asked.
struct StatusRequest {
  bool json = false;  // --json: one JSON object
  /// The job's run directory or the --log-dir it was given; unset: run directories in $TMPDIR
  /// (else /tmp) are searched.
  std::optional<std::string> dir;
};

/// Returns the exit code: 0 answered, 1 no job found or no answer, 2 several jobs to choose from.
int run_status_command(const StatusRequest& request);

}  // namespace rankrun::launcher::observe
