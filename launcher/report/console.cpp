#include "launcher/report/console.hpp"

#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "launcher/report/console_writer.hpp"
#include "launcher/report/line_splitter.hpp"

namespace rankrun::launcher {

Console::Console() {
  const char* no_colour = std::getenv("NO_COLOR");
  const char* term = std::getenv("TERM");
  const bool allowed = (no_colour == nullptr || *no_colour == '\0') && !(term && std::strcmp(term, "dumb") == 0);
  for (int fd : {1, 2}) m_colour[fd] = allowed && ::isatty(fd) == 1;
}

void Console::write_all(int fd, std::string_view text) { ConsoleWriter::write(fd, text, ConsoleOrigin::Rankrun); }

std::string Console::plain_prefix(int rank) const {
  return "[" + (m_host.empty() ? std::string() : m_host + ":") + std::to_string(rank) + "] ";
}

void Console::write_line(int fd, int rank, std::string_view line, ConsoleOrigin origin, std::string_view prefix) {
  static constexpr const char* k_colours[] = {"\x1b[36m", "\x1b[33m", "\x1b[35m", "\x1b[32m", "\x1b[34m", "\x1b[31m"};
  m_buffer.clear();
  const bool colour = fd >= 1 && fd <= 2 && m_colour[fd];
  if (colour) m_buffer += k_colours[static_cast<unsigned>(rank) % 6];
  if (prefix.empty()) {
    m_buffer += '[';
    if (!m_host.empty()) {
      m_buffer += m_host;
      m_buffer += ':';
    }
    m_buffer += std::to_string(rank);
    m_buffer += "]";
  } else {
    m_buffer.append(prefix);
  }
  if (colour) m_buffer += "\x1b[0m";
  if (prefix.empty()) m_buffer += ' ';
  m_buffer.append(origin == ConsoleOrigin::Worker ? without_own_rank_tag(line, rank) : line);
  m_buffer += '\n';
  ConsoleWriter::write(fd, m_buffer, origin);
}

}  // namespace rankrun::launcher
