#include <doctest/doctest.h>
#include <sys/wait.h>

#include <csignal>

#include "launcher/types/exit_status.hpp"

using namespace rankrun::launcher;

TEST_CASE("wait statuses become exit codes") {
  CHECK(ExitStatus::from_wait_status(3 << 8) == ExitStatus::exited(3));
  CHECK(ExitStatus::from_wait_status(9) == ExitStatus::killed(9));
  CHECK(ExitStatus::killed(9).shell_code() == 137);
  CHECK(ExitStatus::exited(3).shell_code() == 3);
  CHECK(ExitStatus::exited(0).success());
  CHECK_FALSE(ExitStatus::killed(15).success());
  CHECK(ExitStatus::killed(15).describe() == "SIGTERM");
  CHECK(ExitStatus::exited(1).describe() == "exit 1");
  CHECK(signal_name(11) == "SIGSEGV");
  CHECK(signal_name(200) == "signal 200");
}

TEST_CASE("every signal is named without glibc's sigabbrev_np") {
  CHECK(signal_name(SIGHUP) == "SIGHUP");
  CHECK(signal_name(SIGUSR1) == "SIGUSR1");
  CHECK(signal_name(SIGCHLD) == "SIGCHLD");
  CHECK(signal_name(SIGSYS) == "SIGSYS");
  CHECK(signal_name(SIGRTMIN) == "SIGRTMIN");
  CHECK(signal_name(SIGRTMIN + 3) == "SIGRTMIN+3");
  CHECK(signal_name(0) == "signal 0");
  CHECK(signal_name(-1) == "signal -1");
}
