#pragma once
// Writes worker lines to rankrun's stdout/stderr, each line whole and prefixed with its rank,
// through the ConsoleWriter: once it has started, a console that does not keep up costs lines,
// never the event loop.

#include <string>
#include <string_view>

#include "launcher/report/console_queue.hpp"

namespace rankrun::launcher {

class Console {
 public:
  /// Colours only when the stream is a terminal, NO_COLOR is unset and TERM isn't "dumb".
  Console();

  /// Each line whole, so lines from different workers never interleave mid-line. A worker's
  /// line is the first to be dropped when the console does not keep up; a line of rankrun's
  /// own report (a stack dump) has the reserve.
  /// `prefix`, when given, replaces "[rank] " (--log-line-prefix-template), as it is.
  void write_line(int fd, int rank, std::string_view line, ConsoleOrigin origin = ConsoleOrigin::Worker,
                  std::string_view prefix = {});
  /// The prefix of rank `rank`'s lines without colour: "[rank] " or "[host:rank] ".
  std::string plain_prefix(int rank) const;
  /// In a multi-node job lines read "[host:rank] ...": `host` is this node's address.
  void set_host(std::string host) { m_host = std::move(host); }
  /// Text from rankrun itself (the summary, whole lines) to stdout (1) or stderr (2).
  static void write_all(int fd, std::string_view text);

 private:
  bool m_colour[3] = {false, false, false};
  std::string m_buffer;
  std::string m_host;
};

}  // namespace rankrun::launcher
