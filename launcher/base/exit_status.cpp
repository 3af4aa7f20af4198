#include "launcher/base/exit_status.hpp"

#include <sys/wait.h>

#include <csignal>
#include <iterator>

namespace rankrun::launcher {

ExitStatus ExitStatus::from_wait_status(int status) {
  if (WIFSIGNALED(status)) return killed(WTERMSIG(status));
  return exited(WEXITSTATUS(status));
}

std::string ExitStatus::describe() const { return signaled ? signal_name(value) : "exit " + std::to_string(value); }

std::string signal_name(int signo) {
  // Linux's signal numbers on x86_64, by their names (glibc's sigabbrev_np() is 2.32+, and the
  // portable binaries run on glibc 2.28). Real-time signals are SIGRTMIN+n, as kill -l says.
  static constexpr const char* k_names[] = {nullptr,  "HUP",  "INT",    "QUIT", "ILL",   "TRAP", "ABRT", "BUS",
                                            "FPE",    "KILL", "USR1",   "SEGV", "USR2",  "PIPE", "ALRM", "TERM",
                                            "STKFLT", "CHLD", "CONT",   "STOP", "TSTP",  "TTIN", "TTOU", "URG",
                                            "XCPU",   "XFSZ", "VTALRM", "PROF", "WINCH", "IO",   "PWR",  "SYS"};
  if (signo > 0 && signo < static_cast<int>(std::size(k_names))) return std::string("SIG") + k_names[signo];
  if (signo >= SIGRTMIN && signo <= SIGRTMAX) {
    return signo == SIGRTMIN ? "SIGRTMIN" : "SIGRTMIN+" + std::to_string(signo - SIGRTMIN);
  }
  return "signal " + std::to_string(signo);
}

}  // namespace rankrun::launcher
