#include "stack_dump_handler.hpp"

#include <execinfo.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "base/parse_number.hpp"
#include "worker_runtime/backtrace.hpp"

// How a dump is taken, and why in two steps. Resolving frames to functions, files and lines
// reads debug information and allocates, which a signal handler must not do: the signal may
// have interrupted malloc or the dynamic loader. So the handler only does what is
// async-signal-safe: it captures the raw return addresses (Boost.Stacktrace's safe_dump_to,
// i.e. the unwinder, warmed up at installation), writes them at once as raw frames
// ("#<n> object(symbol+offset) [address]", through backtrace_symbols_fd) so that rankrun gets
// a stack even if nothing else works, and wakes a symbolizer thread through a pipe. That
// thread, outside any signal handler, resolves the same addresses and replaces the file
// (write a temporary, rename over it) with the resolved frames, well within the time rankrun
// waits for the dump. The trade-off: one idle thread per process, blocked in read(), and a
// stack left raw when the process is stuck holding a lock the symbolizer needs (malloc's).

namespace rankrun::worker {
namespace {

constexpr std::size_t k_max_frames = 128;
// Frames between the handler and the interrupted one: the handler, the kernel's trampoline.
constexpr std::size_t k_max_handler_frames = 8;

std::atomic<int> g_signal{0};
std::atomic<int> g_fd{-1};        // the current <pid>.stack
pid_t g_pid = 0;                  // the installing process: a fork child has no symbolizer
char g_path[PATH_MAX];            // <dir>/<pid>.stack
int g_wake[2] = {-1, -1};         // handler -> symbolizer; [1] stays -1 without a symbolizer
std::atomic<bool> g_busy{false};  // a dump is being written; requests meanwhile are dropped

// The request the handler leaves for the symbolizer (published by the pipe write).
void* g_frames[k_max_frames];
std::size_t g_count = 0;
std::size_t g_exact = 0;  // index of the interrupted instruction, g_count if none
long g_tid = 0;

void write_all(int fd, const char* text, std::size_t n) {
  while (n > 0) {
    const auto w = ::write(fd, text, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    text += w;
    n -= static_cast<std::size_t>(w);
  }
}

// Async-signal-safe decimal formatting.
std::size_t put_decimal(char* out, unsigned long value) {
  char digits[24];
  std::size_t d = 0;
  do {
    digits[d++] = static_cast<char>('0' + value % 10);
    value /= 10;
  } while (value > 0 && d < sizeof digits);
  std::size_t n = 0;
  while (d > 0) out[n++] = digits[--d];
  return n;
}

// "Thread <tid> (native, innermost first):\n"; async-signal-safe.
std::size_t put_header(char* out, long tid) {
  const char prefix[] = "Thread ";
  const char suffix[] = " (native, innermost first):\n";
  std::size_t n = 0;
  std::memcpy(out, prefix, sizeof prefix - 1);
  n += sizeof prefix - 1;
  n += put_decimal(out + n, static_cast<unsigned long>(tid));
  std::memcpy(out + n, suffix, sizeof suffix - 1);
  n += sizeof suffix - 1;
  return n;
}

// The instruction the signal interrupted, where the architecture is known.
const void* interrupted_pc(void* context) {
  const auto* uc = static_cast<const ucontext_t*>(context);
  if (!uc) return nullptr;
#if defined(__x86_64__)
  return reinterpret_cast<const void*>(uc->uc_mcontext.gregs[REG_RIP]);
#elif defined(__aarch64__)
  return reinterpret_cast<const void*>(uc->uc_mcontext.pc);
#else
  return nullptr;
#endif
}

// Async-signal-safe only: the calls below are write, ftruncate, getpid, syscall(gettid),
// backtrace_symbols_fd and the unwinder (see the comment at the top).
void on_signal(int, siginfo_t*, void* context) {
  const int saved_errno = errno;
  if (::getpid() != g_pid || g_busy.exchange(true)) {
    errno = saved_errno;
    return;
  }
  const std::size_t count = capture_frames(g_frames, k_max_frames, 0);
  // Start at the interrupted frame: leave out this handler and the signal trampoline. Without
  // the interrupted address, leave out this handler only.
  std::size_t first = count > 0 ? 1 : 0;
  bool found = false;
  if (const void* pc = interrupted_pc(context)) {
    for (std::size_t i = 0; i < count && i < k_max_handler_frames && !found; ++i) {
      if (g_frames[i] == pc) {
        first = i;
        found = true;
      }
    }
  }
  g_count = count - first;
  if (first > 0) std::memmove(g_frames, g_frames + first, g_count * sizeof(void*));
  g_exact = found ? 0 : g_count;
  g_tid = ::syscall(SYS_gettid);

  const int fd = g_fd.load();
  if (fd >= 0 && ::ftruncate(fd, 0) == 0) {
    char line[96];
    write_all(fd, line, put_header(line, g_tid));
    for (std::size_t i = 0; i < g_count; ++i) {
      line[0] = '#';
      std::size_t n = 1 + put_decimal(line + 1, i);
      line[n++] = ' ';
      write_all(fd, line, n);
      ::backtrace_symbols_fd(&g_frames[i], 1, fd);
    }
  }
  std::atomic_thread_fence(std::memory_order_release);
  const char wake = 1;
  if (g_wake[1] < 0 || ::write(g_wake[1], &wake, 1) != 1) g_busy.store(false);
  errno = saved_errno;
}

// Replaces <pid>.stack with `text`, atomically: rankrun may read it at any moment.
void replace_stack_file(const std::string& text) {
  const std::string tmp = std::string(g_path) + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_APPEND, 0644);
  if (fd < 0) return;
  write_all(fd, text.data(), text.size());
  if (::rename(tmp.c_str(), g_path) != 0) {
    ::close(fd);
    ::unlink(tmp.c_str());
    return;
  }
  // The handler writes the next raw dump into the file that now has the name.
  const int old = g_fd.exchange(fd);
  if (old >= 0) ::close(old);
}

void* symbolizer_main(void*) {
  for (;;) {
    char wake = 0;
    const auto r = ::read(g_wake[0], &wake, 1);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return nullptr;
    std::atomic_thread_fence(std::memory_order_acquire);
    try {
      char header[96];
      std::string text(header, put_header(header, g_tid));
      text += symbolize_frames(g_frames, g_count, g_exact);
      replace_stack_file(text);
    } catch (...) {
      // Out of memory: the raw frames stay.
    }
    g_busy.store(false);
  }
}

// A thread that sleeps in read() until the handler wakes it, with every signal blocked, so
// that no signal meant for the trainer lands on it.
bool start_symbolizer() {
  if (::pipe2(g_wake, O_CLOEXEC) != 0) {
    g_wake[0] = g_wake[1] = -1;
    return false;
  }
  sigset_t all;
  sigset_t previous;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &previous);
  pthread_attr_t attr;
  ::pthread_attr_init(&attr);
  ::pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_t thread;
  const bool started = ::pthread_create(&thread, &attr, symbolizer_main, nullptr) == 0;
  ::pthread_attr_destroy(&attr);
  ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  if (started) {
    ::pthread_setname_np(thread, "rankrun-stacks");
    return true;
  }
  ::close(g_wake[0]);
  ::close(g_wake[1]);
  g_wake[0] = g_wake[1] = -1;
  return false;
}

}  // namespace

void install_stack_dump_handler() noexcept {
  const char* dir = std::getenv("RANKRUN_STACK_DIR");
  const char* sig = std::getenv("RANKRUN_STACK_SIGNAL");
  if (!dir || !sig || g_signal.load() != 0) return;
  const int signo = rankrun::parse_number<int>(sig).value_or(0);
  if (signo <= 0 || signo >= NSIG) return;
  g_pid = ::getpid();
  const int len = std::snprintf(g_path, sizeof g_path, "%s/%ld.stack", dir, static_cast<long>(g_pid));
  if (len <= 0 || static_cast<std::size_t>(len) >= sizeof g_path) return;
  const int fd = ::open(g_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_APPEND, 0644);
  if (fd < 0) return;
  if (const int old = g_fd.exchange(fd); old >= 0) ::close(old);  // an earlier, failed installation's
  // The unwinder and backtrace_symbols_fd may load or initialise what they need on their
  // first call, which may allocate: do it now, not in the handler.
  void* warm[2];
  if (capture_frames(warm, 2, 0) > 0) {
    const int null = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (null >= 0) {
      ::backtrace_symbols_fd(warm, 1, null);
      ::close(null);
    }
  }
  if (g_wake[1] < 0) start_symbolizer();  // without it, dumps stay raw
  struct sigaction sa {};
  sa.sa_sigaction = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART | SA_SIGINFO;
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
