#pragma once
// Splits a byte stream into whole lines. Pure; one per worker stream.

#include <cstddef>
#include <string>
#include <string_view>

namespace rankrun::launcher {

/// `line` without torch 2.x's own "[rank<rank>]: " tag at its start (torch's logging and its
/// exceptions print it), which the console's "[<rank>] " prefix already says: "[1] [rank1]: x"
/// would repeat it. Another rank's tag, or text that only looks like one, is left.
/// Called for every line a worker prints: no allocation.
inline std::string_view without_own_rank_tag(std::string_view line, int rank) {
  constexpr std::string_view open = "[rank";
  if (line.substr(0, open.size()) != open) return line;
  std::size_t end = open.size();
  long long number = 0;
  while (end < line.size() && end < open.size() + 10 && line[end] >= '0' && line[end] <= '9') {
    number = number * 10 + (line[end++] - '0');
  }
  if (end == open.size() || number != rank || line.substr(end, 2) != "]:") return line;
  line.remove_prefix(end + 2);
  if (!line.empty() && line.front() == ' ') line.remove_prefix(1);
  return line;
}

class LineSplitter {
 public:
  /// Lines longer than `max_line` bytes are passed on in pieces of that size, so a worker that
  /// never prints a newline cannot make rankrun's memory grow without bound.
  explicit LineSplitter(std::size_t max_line = 1 << 20) : m_max_line(max_line) {}

  /// Calls `sink(line)` for each complete line in `bytes` (without its '\n').
  template <class Sink>
  void feed(std::string_view bytes, Sink&& sink) {
    while (!bytes.empty()) {
      const auto nl = bytes.find('\n');
      if (nl == std::string_view::npos) {
        append_partial(bytes, sink);
        return;
      }
      const auto line = bytes.substr(0, nl);
      if (m_pending.empty() && line.size() <= m_max_line) {
        sink(line);  // the common case: no copy
      } else {
        append_partial(line, sink);
        sink(std::string_view(m_pending));
        m_pending.clear();
      }
      bytes.remove_prefix(nl + 1);
    }
  }

  /// At end of stream: a last line without a newline is not lost.
  template <class Sink>
  void finish(Sink&& sink) {
    if (!m_pending.empty()) sink(std::string_view(m_pending));
    m_pending.clear();
  }

 private:
  template <class Sink>
  void append_partial(std::string_view bytes, Sink& sink) {
    while (m_pending.size() + bytes.size() > m_max_line) {
      const auto take = m_max_line - m_pending.size();
      m_pending.append(bytes.substr(0, take));
      sink(std::string_view(m_pending));
      m_pending.clear();
      bytes.remove_prefix(take);
    }
    m_pending.append(bytes);
  }

  std::size_t m_max_line;
  std::string m_pending;
};

}  // namespace rankrun::launcher
