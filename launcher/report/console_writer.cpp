#include "launcher/report/console_writer.hpp"

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <mutex>
#include <spdlog/details/os.h>
#include <spdlog/sinks/base_sink.h>
#include <string>
#include <thread>

namespace rankrun::launcher {
namespace {

// Bytes handed to one write(): many short lines go out in one system call.
constexpr std::size_t k_write_batch = 64 << 10;
// A console someone made non-blocking (EAGAIN) is polled this long before the next try.
constexpr int k_poll_ms = 100;

// Writes all of `text` to `fd` at once, before the threads start and after they stopped.
void write_now(int fd, std::string_view text) {
  while (!text.empty()) {
    const auto n = ::write(fd, text.data(), text.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return;  // console gone (EPIPE, EBADF): nothing useful left to do with the text
    }
    text.remove_prefix(static_cast<std::size_t>(n));
  }
}

// Writes some of `bytes` to `fd`: the count written, or -1 when the destination is gone.
ssize_t write_some(int fd, std::string_view bytes) {
  while (true) {
    const auto n = ::write(fd, bytes.data(), bytes.size());
    if (n >= 0) return n;
    if (errno == EINTR) continue;
    if (errno != EAGAIN) return -1;
    pollfd p{fd, POLLOUT, 0};
    ::poll(&p, 1, k_poll_ms);
  }
}

// One destination (stdout, stderr, or both when they are the same file): its queue and the
// thread that empties it.
struct Channel {
  std::mutex mutex;
  std::condition_variable changed;  // text queued, some written, or stop
  ConsoleQueue queue{ConsoleWriter::k_capacity, ConsoleWriter::k_reserve};
  bool stopping = false;
  std::thread thread;

  void run() {
    // Signals are for the event loop's thread; a handler here would only interrupt a write.
    sigset_t all;
    ::sigfillset(&all);
    ::pthread_sigmask(SIG_BLOCK, &all, nullptr);
    std::string batch;
    std::unique_lock<std::mutex> lock(mutex);
    while (true) {
      changed.wait(lock, [this] { return !queue.empty() || stopping; });
      if (queue.empty()) return;
      const int fd = queue.head(batch, k_write_batch);
      lock.unlock();
      const auto written = write_some(fd, batch);
      lock.lock();
      if (written < 0) {
        queue.close();
      } else {
        queue.consumed(static_cast<std::size_t>(written));
      }
      if (queue.empty()) changed.notify_all();
    }
  }
};

enum class Mode { Direct, Queued, GivenUp };

// Never destroyed, nor are its channels: a thread given up on may still be in write() while
// the process exits.
struct Writer {
  std::atomic<Mode> mode{Mode::Direct};
  bool started = false;
  Channel* channel_of[3] = {nullptr, nullptr, nullptr};  // by fd
  Channel* channels[2] = {nullptr, nullptr};
};

Writer& writer() {
  static auto* w = new Writer;
  return *w;
}

// stdout and stderr are one destination when they are the same file (a terminal, 2>&1): one
// queue then keeps their lines in the order they were written, as they always were.
bool same_file(int a, int b) {
  struct stat sa {};
  struct stat sb {};
  return ::fstat(a, &sa) == 0 && ::fstat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

// spdlog's colours for each level, as its ansicolor_sink has them.
constexpr std::string_view k_level_colours[] = {
    "\033[37m",         // trace: white
    "\033[36m",         // debug: cyan
    "\033[32m",         // info: green
    "\033[33m\033[1m",  // warn: yellow, bold
    "\033[31m\033[1m",  // error: red, bold
    "\033[1m\033[41m",  // critical: bold on red
    "\033[m",           // off
};
constexpr std::string_view k_reset = "\033[m";

class LogSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  LogSink() {
    const char* no_colour = std::getenv("NO_COLOR");
    m_colour = (no_colour == nullptr || *no_colour == '\0') && spdlog::details::os::in_terminal(stderr) &&
               spdlog::details::os::is_color_terminal();
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    msg.color_range_start = 0;
    msg.color_range_end = 0;
    spdlog::memory_buf_t formatted;
    formatter_->format(msg, formatted);
    const std::string_view text(formatted.data(), formatted.size());
    const auto level = static_cast<std::size_t>(msg.level);
    if (!m_colour || msg.color_range_end <= msg.color_range_start || level >= std::size(k_level_colours)) {
      ConsoleWriter::write(2, text, ConsoleOrigin::Rankrun);
      return;
    }
    std::string coloured(text.substr(0, msg.color_range_start));
    coloured += k_level_colours[level];
    coloured += text.substr(msg.color_range_start, msg.color_range_end - msg.color_range_start);
    coloured += k_reset;
    coloured += text.substr(msg.color_range_end);
    ConsoleWriter::write(2, coloured, ConsoleOrigin::Rankrun);
  }
  void flush_() override {}

 private:
  bool m_colour = false;
};

}  // namespace

void ConsoleWriter::start() {
  auto& w = writer();
  if (w.started) return;
  w.started = true;
  w.channels[0] = new Channel;
  w.channels[1] = same_file(1, 2) ? nullptr : new Channel;
  w.channel_of[1] = w.channels[0];
  w.channel_of[2] = w.channels[1] != nullptr ? w.channels[1] : w.channels[0];
  for (auto* c : w.channels) {
    if (c != nullptr) c->thread = std::thread([c] { c->run(); });
  }
  w.mode.store(Mode::Queued);
}

void ConsoleWriter::write(int fd, std::string_view text, ConsoleOrigin origin) {
  auto& w = writer();
  switch (w.mode.load()) {
    case Mode::Direct: write_now(fd, text); return;
    case Mode::GivenUp: return;
    case Mode::Queued: break;
  }
  if (fd < 1 || fd > 2) return;
  auto& c = *w.channel_of[fd];
  std::lock_guard<std::mutex> lock(c.mutex);
  const bool was_empty = c.queue.empty();
  if (c.queue.push(fd, text, origin) && was_empty) c.changed.notify_all();
}

bool ConsoleWriter::finish(std::chrono::milliseconds timeout) {
  auto& w = writer();
  if (w.mode.load() != Mode::Queued) return true;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  bool all_written = true;
  for (auto* c : w.channels) {
    if (c == nullptr) continue;
    std::unique_lock<std::mutex> lock(c->mutex);
    c->stopping = true;
    c->changed.notify_all();
    if (c->changed.wait_until(lock, deadline, [c] { return c->queue.empty(); })) {
      lock.unlock();
      c->thread.join();
    } else {
      // Stuck in write(): the thread and its channel are left as they are, to the exit.
      c->queue.close();
      lock.unlock();
      c->thread.detach();
      all_written = false;
    }
  }
  w.mode.store(all_written ? Mode::Direct : Mode::GivenUp);
  return all_written;
}

std::shared_ptr<spdlog::sinks::sink> ConsoleWriter::log_sink() { return std::make_shared<LogSink>(); }

}  // namespace rankrun::launcher
