#include "stack_dump_handler.hpp"

#include <execinfo.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

namespace rankrun::worker {
namespace {

std::atomic<int> g_signal{0};
int g_fd = -1;

void write_all(int fd, const char* text, std::size_t n) {
  while (n > 0) {
    const auto w = ::write(fd, text, n);
    if (w <= 0) return;
    text += w;
    n -= static_cast<std::size_t>(w);
  }
}

// Only async-signal-safe calls: write, backtrace (preloaded at install), backtrace_symbols_fd.
void on_signal(int) {
  const int saved_errno = errno;
  char header[96];
  const long tid = ::syscall(SYS_gettid);
  int len = 0;
  const char prefix[] = "Thread ";
  std::memcpy(header, prefix, sizeof prefix - 1);
  len = sizeof prefix - 1;
  char digits[24];
  int d = 0;
  for (long v = tid; v > 0 && d < 20; v /= 10) digits[d++] = static_cast<char>('0' + v % 10);
  while (d > 0) header[len++] = digits[--d];
  const char suffix[] = " (native, innermost first):\n";
  std::memcpy(header + len, suffix, sizeof suffix - 1);
  len += static_cast<int>(sizeof suffix - 1);
  write_all(g_fd, header, static_cast<std::size_t>(len));
  void* frames[128];
  const int n = ::backtrace(frames, 128);
  ::backtrace_symbols_fd(frames, n, g_fd);
  errno = saved_errno;
}

}  // namespace

void install_stack_dump_handler() noexcept {
  const char* dir = std::getenv("RANKRUN_STACK_DIR");
  const char* sig = std::getenv("RANKRUN_STACK_SIGNAL");
  if (!dir || !sig || g_signal.load() != 0) return;
  const int signo = std::atoi(sig);
  if (signo <= 0 || signo >= NSIG) return;
  try {
    const std::string path = std::string(dir) + "/" + std::to_string(::getpid()) + ".stack";
    g_fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_APPEND, 0644);
  } catch (...) {
    return;
  }
  if (g_fd < 0) return;
  // backtrace() loads libgcc on its first call, which may allocate: do it now, not in the handler.
  void* warm[1];
  (void)::backtrace(warm, 1);
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  if (::sigaction(signo, &sa, nullptr) == 0) g_signal.store(signo);
}

void block_stack_dump_signal() noexcept {
  const int signo = g_signal.load();
  if (signo == 0) return;
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, signo);
  ::pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

}  // namespace rankrun::worker
