#pragma once
// A test case that cannot run here (a program it starts is not installed, the machine has no
// IPv6) must not pass: SKIP_UNLESS(condition, reason), in the case's own body, prints
// "skipped: CASE: REASON", records the case as skipped, and ends it. doctest has no skip of its
// own: the binary's main() (rendezvous_main.cpp) counts the skipped cases after the run and exits
// with k_skip_exit_code when any case was skipped and none failed, and CTest, told so
// (SKIP_RETURN_CODE), reports the test as "Skipped", not "Passed". A failure still fails.

#include <string>

namespace rankrun::test {

/// The exit code of a run in which no case failed and at least one could not run (Automake's).
constexpr int k_skip_exit_code = 77;

/// Records that the running test case could not run, and why. The caller ends the case.
void skip_case(const std::string& reason);

}  // namespace rankrun::test

#define SKIP_UNLESS(condition, reason)    \
  do {                                    \
    if (!(condition)) {                   \
      ::rankrun::test::skip_case(reason); \
      return;                             \
    }                                     \
  } while (false)
