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

/// Splits a stream into lines at "\n" (a "\r\n" is one line end too). A "\r" alone ends a
/// progress update (tqdm redraws its bar with "\r", and writes "\n" only when it closes): what
/// came since the last line end or "\r" goes to the progress sink instead of the line sink, so a
/// bar is neither held back until its line ends nor one ever-growing line.
class LineSplitter {
 public:
  /// Lines longer than `max_line` bytes are passed on in pieces of that size, so a worker that
  /// never prints a newline cannot make rankrun's memory grow without bound.
  explicit LineSplitter(std::size_t max_line = 1 << 20) : m_max_line(max_line) {}

  /// Calls `sink(line)` for each complete line in `bytes` (without its "\n" or "\r\n"), and
  /// `progress(update)` for each non-empty one ended by a "\r" alone.
  template <class Sink, class Progress>
  void feed(std::string_view bytes, Sink&& sink, Progress&& progress) {
    if (m_cr && !bytes.empty()) {
      // The last read ended with "\r": this read's first byte tells which kind it was.
      m_cr = false;
      if (bytes.front() == '\n') {
        end_line(std::string_view(), sink);
        bytes.remove_prefix(1);
      } else {
        end_progress(std::string_view(), sink, progress);
      }
    }
    while (!bytes.empty()) {
      const auto at = bytes.find_first_of("\r\n");
      if (at == std::string_view::npos) {
        append_partial(bytes, sink);
        return;
      }
      const auto piece = bytes.substr(0, at);
      if (bytes[at] == '\n' || (at + 1 < bytes.size() && bytes[at + 1] == '\n')) {
        end_line(piece, sink);
        bytes.remove_prefix(at + (bytes[at] == '\n' ? 1 : 2));
      } else if (at + 1 == bytes.size()) {
        append_partial(piece, sink);
        m_cr = true;
        return;
      } else {
        end_progress(piece, sink, progress);
        bytes.remove_prefix(at + 1);
      }
    }
  }

  /// At end of stream: a last line without a newline is not lost (nor a last progress update,
  /// which becomes a line: it is the stream's final state).
  template <class Sink>
  void finish(Sink&& sink) {
    m_cr = false;
    if (!m_pending.empty()) sink(std::string_view(m_pending));
    m_pending.clear();
  }

 private:
  template <class Sink>
  void end_line(std::string_view piece, Sink& sink) {
    if (m_pending.empty() && piece.size() <= m_max_line) {
      sink(piece);  // the common case: no copy
      return;
    }
    append_partial(piece, sink);
    sink(std::string_view(m_pending));
    m_pending.clear();
  }

  template <class Sink, class Progress>
  void end_progress(std::string_view piece, Sink& sink, Progress& progress) {
    if (m_pending.empty() && piece.size() <= m_max_line) {
      if (!piece.empty()) progress(piece);
      return;
    }
    append_partial(piece, sink);
    if (!m_pending.empty()) progress(std::string_view(m_pending));
    m_pending.clear();
  }

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
  bool m_cr = false;  // the last read ended with "\r"
};

}  // namespace rankrun::launcher
