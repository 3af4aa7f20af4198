#include "base/read_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "base/unique_fd.hpp"

namespace rankrun {

FileRead read_file(const std::string& path, std::size_t max_bytes, bool regular_only) {
  FileRead out;
  const UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | (regular_only ? O_NONBLOCK : 0)));
  if (!fd) {
    out.error = errno;
    return out;
  }
  out.opened = true;
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) {
    out.error = errno;
    return out;
  }
  out.regular = S_ISREG(st.st_mode);
  out.mode = static_cast<unsigned>(st.st_mode & 07777);
  if (regular_only && !out.regular) return out;
  // One byte more than asked for: a file longer than max_bytes is told from one of max_bytes.
  const std::size_t want = max_bytes + 1;
  char buffer[8192];
  while (out.text.size() < want) {
    const ssize_t n = ::read(fd.get(), buffer, std::min(sizeof buffer, want - out.text.size()));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      out.error = errno;
      out.text.clear();
      return out;
    }
    if (n == 0) break;
    out.text.append(buffer, static_cast<std::size_t>(n));
  }
  if (out.text.size() > max_bytes) {
    out.truncated = true;
    out.text.resize(max_bytes);
  }
  return out;
}

std::optional<std::string> read_file_head(const std::string& path, std::size_t max_bytes) {
  auto r = read_file(path, max_bytes);
  if (!r.ok()) return std::nullopt;
  return std::move(r.text);
}

std::optional<std::string> command_line_of(long pid) {
  auto text = read_file_head("/proc/" + std::to_string(pid) + "/cmdline", 4096);
  if (!text) return std::nullopt;
  while (!text->empty() && text->back() == '\0') text->pop_back();
  std::replace(text->begin(), text->end(), '\0', ' ');
  return text;
}

}  // namespace rankrun
