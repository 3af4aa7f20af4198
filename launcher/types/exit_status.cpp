#include "launcher/types/exit_status.hpp"

#include <sys/wait.h>

#include <iterator>

namespace rankrun::launcher {

ExitStatus ExitStatus::from_wait_status(int status) {
  if (WIFSIGNALED(status)) return killed(WTERMSIG(status));
  return exited(WEXITSTATUS(status));
}

std::string ExitStatus::describe() const { return signaled ? signal_name(value) : "exit " + std::to_string(value); }

namespace {
// Linux's signal numbers on x86_64, by their names (glibc's sigabbrev_np() is 2.32+, and the
// portable binaries run on glibc 2.28); a fixed ABI, written here so that this pure code needs no
// signal header. Real-time signals are SIGRTMIN+n, as kill -l says: glibc's SIGRTMIN is 34 (the
// kernel's 32 and 33 are its threads').
constexpr const char* k_names[] = {nullptr,  "HUP",  "INT",    "QUIT", "ILL",   "TRAP", "ABRT", "BUS",
                                   "FPE",    "KILL", "USR1",   "SEGV", "USR2",  "PIPE", "ALRM", "TERM",
                                   "STKFLT", "CHLD", "CONT",   "STOP", "TSTP",  "TTIN", "TTOU", "URG",
                                   "XCPU",   "XFSZ", "VTALRM", "PROF", "WINCH", "IO",   "PWR",  "SYS"};
constexpr int k_rt_min = 34;
constexpr int k_rt_max = 64;
}  // namespace

std::string signal_name(int signo) {
  if (signo > 0 && signo < static_cast<int>(std::size(k_names))) return std::string("SIG") + k_names[signo];
  if (signo >= k_rt_min && signo <= k_rt_max) {
    return signo == k_rt_min ? "SIGRTMIN" : "SIGRTMIN+" + std::to_string(signo - k_rt_min);
  }
  return "signal " + std::to_string(signo);
}

std::optional<int> signal_number(std::string_view name) {
  for (int signo = 1; signo <= k_rt_max; ++signo) {
    if (signal_name(signo) == name) return signo;
  }
  return std::nullopt;
}

}  // namespace rankrun::launcher
