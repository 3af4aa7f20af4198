#include "launcher/base/exit_status.hpp"

#include <sys/wait.h>

#include <cstring>

namespace rankrun::launcher {

ExitStatus ExitStatus::from_wait_status(int status) {
  if (WIFSIGNALED(status)) return killed(WTERMSIG(status));
  return exited(WEXITSTATUS(status));
}

std::string ExitStatus::describe() const { return signaled ? signal_name(value) : "exit " + std::to_string(value); }

std::string signal_name(int signo) {
  // sigabbrev_np() is glibc 2.32+; Debian 12 has 2.36.
  if (const char* abbrev = sigabbrev_np(signo)) return std::string("SIG") + abbrev;
  return "signal " + std::to_string(signo);
}

}  // namespace rankrun::launcher
