#include "launcher/report/console_queue.hpp"

#include <algorithm>

namespace rankrun::launcher {
namespace {

constexpr std::size_t k_chunk_bytes = 64 << 10;

}  // namespace

ConsoleQueue::ConsoleQueue(std::size_t capacity, std::size_t reserve) : m_capacity(capacity), m_reserve(reserve) {}

bool ConsoleQueue::push(int fd, std::string_view text, ConsoleOrigin origin) {
  if (m_closed || text.empty()) return false;
  const bool worker = origin == ConsoleOrigin::Worker;
  const std::size_t limit = worker ? m_capacity : m_capacity + m_reserve;
  // A worker's line waits for the drain after a drop, so that output resumes with the notice
  // and the gaps are few and long rather than many and short.
  const bool fits = m_chunks.empty() || (m_bytes + text.size() <= limit && !(worker && m_dropping));
  if (!fits) {
    m_dropping = true;
    const auto newlines = static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n'));
    m_dropped_lines += text.back() == '\n' ? newlines : newlines + 1;
    m_dropped_bytes += text.size();
    m_dropped_fd = fd;
    return false;
  }
  // Short lines share a chunk: the queue's memory stays close to the bytes it holds.
  if (!m_chunks.empty() && m_chunks.back().fd == fd && m_chunks.back().text.size() + text.size() <= k_chunk_bytes) {
    m_chunks.back().text.append(text);
  } else {
    m_chunks.push_back(Chunk{fd, std::string(text)});
  }
  m_bytes += text.size();
  return true;
}

int ConsoleQueue::head(std::string& out, std::size_t max) const {
  out.clear();
  if (m_chunks.empty()) return -1;
  const int fd = m_chunks.front().fd;
  std::size_t skip = m_head_offset;
  for (const auto& chunk : m_chunks) {
    if (chunk.fd != fd || out.size() >= max) break;
    out.append(std::string_view(chunk.text).substr(skip, max - out.size()));
    skip = 0;
  }
  return fd;
}

void ConsoleQueue::consumed(std::size_t n) {
  n = std::min(n, m_bytes);
  m_bytes -= n;
  while (n > 0 && !m_chunks.empty()) {
    const std::size_t left = m_chunks.front().text.size() - m_head_offset;
    if (n < left) {
      m_head_offset += n;
      return;
    }
    n -= left;
    m_chunks.pop_front();
    m_head_offset = 0;
  }
  if (m_chunks.empty() && m_dropping) {
    // Drained: output resumes, and its first line says what is missing before it.
    m_dropping = false;
    if (m_dropped_lines > 0) {
      auto notice = drop_notice(m_dropped_lines, m_dropped_bytes);
      m_bytes += notice.size();
      m_chunks.push_back(Chunk{m_dropped_fd, std::move(notice)});
    }
    m_dropped_lines = 0;
    m_dropped_bytes = 0;
  }
}

void ConsoleQueue::close() {
  m_closed = true;
  m_chunks.clear();
  m_head_offset = 0;
  m_bytes = 0;
}

std::string ConsoleQueue::drop_notice(std::size_t lines, std::size_t bytes) {
  return "rankrun: the console did not keep up: " + std::to_string(lines) + (lines == 1 ? " line (" : " lines (") +
         std::to_string(bytes) + (bytes == 1 ? " byte) " : " bytes) ") + "of output " + (lines == 1 ? "was" : "were") +
         " dropped\n";
}

}  // namespace rankrun::launcher
