#pragma once
// `rankrun status [--json] [DIR]`: finds the running job's rankrun on this machine (its status
// socket in its run directory) and prints what it answers.

namespace rankrun::launcher::observe {

/// argv without "rankrun" ("status", ...); returns the exit code: 0 answered, 1 no job found or
/// no answer, 2 a usage error or several jobs to choose from.
int run_status_command(int argc, const char* const* argv);

}  // namespace rankrun::launcher::observe
