#pragma once
// What rankrun has yet to write to one console destination (its stdout, its stderr, or both
// when they are the same file): whole lines in the order they came, bounded, and the lines that
// did not fit counted. Pure: the thread that empties it is ConsoleWriter's.
//
// A console that does not keep up costs output, never the job: a line that does not fit is
// dropped whole, and so is every worker line after it until the queue has drained; then one
// line says how much was lost, where it was lost.

#include <cstddef>
#include <deque>
#include <string>
#include <string_view>

namespace rankrun::launcher {

/// Who wrote a line. Workers' lines are dropped first: rankrun's own (its log lines, the
/// summary, the hang report) have a reserve on top of the capacity, so that a flood of worker
/// output does not cost the report that explains the job.
enum class ConsoleOrigin { Worker, Rankrun };

class ConsoleQueue {
 public:
  /// `capacity` bytes for any text, `reserve` bytes more for rankrun's own.
  ConsoleQueue(std::size_t capacity, std::size_t reserve);

  /// Queues `text` (whole lines, each ending in '\n') for the file descriptor `fd`, or drops
  /// and counts it when it does not fit (or, for a worker's line, while the queue drains after
  /// a drop). Text that comes to an empty queue is always taken, however long. Returns whether
  /// it was queued.
  bool push(int fd, std::string_view text, ConsoleOrigin origin);

  bool empty() const { return m_chunks.empty(); }
  /// Bytes queued and not yet written.
  std::size_t bytes() const { return m_bytes; }
  /// Lines and bytes dropped since the last notice.
  std::size_t dropped_lines() const { return m_dropped_lines; }
  std::size_t dropped_bytes() const { return m_dropped_bytes; }

  /// The next bytes to write: replaces `out` with up to `max` bytes from the head, all for one
  /// file descriptor, which it returns (-1 when the queue is empty).
  int head(std::string& out, std::size_t max) const;
  /// The first `n` bytes of the head were written. When that empties a queue that dropped
  /// lines, the notice that says so is queued: the console keeps up again.
  void consumed(std::size_t n);
  /// The destination is gone (EPIPE, EBADF): what is queued is discarded, and so is all text
  /// from now on.
  void close();
  bool closed() const { return m_closed; }

  /// "rankrun: the console did not keep up: 3 lines (120 bytes) of output were dropped\n"
  static std::string drop_notice(std::size_t lines, std::size_t bytes);

 private:
  struct Chunk {
    int fd;
    std::string text;
  };

  std::size_t m_capacity;
  std::size_t m_reserve;
  std::deque<Chunk> m_chunks;
  std::size_t m_head_offset = 0;  // bytes of the first chunk already written
  std::size_t m_bytes = 0;        // queued, not yet written
  bool m_dropping = false;        // a worker line was dropped: drop them until the queue drains
  std::size_t m_dropped_lines = 0;
  std::size_t m_dropped_bytes = 0;
  int m_dropped_fd = 2;  // where the notice goes: the stream that lost the last line
  bool m_closed = false;
};

}  // namespace rankrun::launcher
