#pragma once
#include <stdexcept>
#include <string>

namespace rankrun::launcher {

/// A usage or configuration error: bad flag, bad value, port taken. Caught once in run_cli,
/// printed as "rankrun: error: <message>", exit code 2. The message names the value and the fix.
struct LaunchError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace rankrun::launcher
