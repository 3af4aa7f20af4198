#pragma once

namespace rankrun::launcher {

/// The whole launch, from argv to exit code. The one place that catches LaunchError.
int run_cli(int argc, const char* const* argv);

}  // namespace rankrun::launcher
