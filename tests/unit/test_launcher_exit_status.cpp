#include <doctest/doctest.h>
#include <sys/wait.h>

#include "launcher/base/exit_status.hpp"

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
