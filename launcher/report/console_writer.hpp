#pragma once
// rankrun's stdout and stderr, for the whole process. Once started, text is queued (a
// ConsoleQueue per destination) and a thread per destination writes it, so that a console that
// does not keep up (a full pipe, a paused terminal) never blocks the event loop that also serves
// the store, handles signals and stops the workers: it costs output, and says how much.
//
// Before start() and after finish(), text is written at once, as it always was: then there is
// no event loop to block, and a process forked before start() (the guardian) writes directly.
// A child forked later never writes through here (it only execs).

#include <chrono>
#include <memory>
#include <string_view>

#include "launcher/report/console_queue.hpp"

namespace spdlog::sinks {
class sink;
}

namespace rankrun::launcher {

class ConsoleWriter {
 public:
  /// Bytes each destination may queue, and the reserve on top for rankrun's own text.
  static constexpr std::size_t k_capacity = 4 << 20;
  static constexpr std::size_t k_reserve = 1 << 20;

  /// From now on text is queued and written by threads (no-op when started already). Call it
  /// after the last fork that may run ordinary code in the child.
  static void start();
  /// Writes whole lines to fd 1 or 2: queued when started, at once otherwise. Never blocks once
  /// started; thread-safe.
  static void write(int fd, std::string_view text, ConsoleOrigin origin);
  /// Writes what is queued for at most `timeout`, then stops the threads; text written after
  /// this goes out at once again. When the console does not take the rest in time, it is
  /// given up (and so is all later text): a stuck console must not keep rankrun alive. Returns
  /// whether everything was written.
  static bool finish(std::chrono::milliseconds timeout);

  /// rankrun's log lines ("rankrun: warning: ..."), to stderr through the queue, coloured as
  /// spdlog's colour sink colours them when stderr is a colour terminal and NO_COLOR is unset.
  static std::shared_ptr<spdlog::sinks::sink> log_sink();
};

}  // namespace rankrun::launcher
