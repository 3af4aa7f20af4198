#pragma once
// Writes worker lines to rankrun's stdout/stderr, each line whole and prefixed with its rank.

#include <string>
#include <string_view>

namespace rankrun::launcher {

class Console {
 public:
  /// Colours only when the stream is a terminal, NO_COLOR is unset and TERM isn't "dumb".
  Console();

  /// One write() per line, so lines from different workers never interleave mid-line.
  void write_line(int fd, int rank, std::string_view line);
  /// In a multi-node job lines read "[host:rank] ...": `host` is this node's address.
  void set_host(std::string host) { m_host = std::move(host); }
  /// Text from rankrun itself (the summary), written whole to stderr.
  static void write_all(int fd, std::string_view text);

 private:
  bool m_colour[3] = {false, false, false};
  std::string m_buffer;
  std::string m_host;
};

}  // namespace rankrun::launcher
