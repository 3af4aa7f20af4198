#pragma once
// Failure records: when a worker dies of an exception, write its message and native stack to
// TORCHELASTIC_ERROR_FILE in torch's @record JSON format, which rankrun's report shows as
// the root cause (torchrun's too).
// Public header: C++17.

#include <exception>
#include <string_view>

namespace rankrun {

/// Installs a std::terminate handler that records the active exception (or "std::terminate
/// called without an active exception"), prints it with its backtrace to stderr, then hands
/// over to the previous handler (by default: abort). For an uncaught exception the stack
/// has not been unwound yet, so the backtrace shows where it was thrown. Idempotent.
void install_failure_handler();

/// Records `error` now (type name, what(), and the current stack, i.e. the catch site).
/// Returns true when a file was written; false when TORCHELASTIC_ERROR_FILE is unset or
/// empty, or the file could not be written (a warning then goes to stderr). Never throws.
bool record_failure(const std::exception& error) noexcept;

/// Same, for failures that are not std::exceptions. `type` is e.g. "CudaError".
bool record_failure(std::string_view type, std::string_view message) noexcept;

/// Runs `main_fn(argc, argv)` so that an exception escaping it is recorded with the stack
/// where it was thrown, reported on stderr, and ends the process with exit code 1 (stdio
/// flushed, no destructors run, as for any uncaught exception). It deliberately does not
/// catch: a catch would unwind the stack before the backtrace could be taken.
int run_main(int (*main_fn)(int, char**), int argc, char** argv);

}  // namespace rankrun

/// Defines `main` to run `fn` (an `int fn(int, char**)`) under rankrun::run_main.
#define RANKRUN_RECORD(fn) \
  int main(int argc, char** argv) { return ::rankrun::run_main(fn, argc, argv); }
