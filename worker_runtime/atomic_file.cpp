#include "worker_runtime/atomic_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>

namespace rankrun::worker {
namespace {

[[noreturn]] void fail(const std::string& what, const std::string& path) {
  throw std::system_error(errno, std::generic_category(), what + " " + path);
}

// mkdir -p of the folders above `path`, errors ignored (the open that follows reports them).
// By hand rather than with std::filesystem, which would raise the libstdc++ the runtime needs to
// GCC 9's (GLIBCXX_3.4.26): the portable runtime loads with RHEL 8's (docs/building.md).
void make_parents(const std::string& path) {
  for (std::size_t slash = path.find('/', 1); slash != std::string::npos; slash = path.find('/', slash + 1)) {
    const std::string dir = path.substr(0, slash);
    if (::mkdir(dir.c_str(), 0777) != 0 && errno != EEXIST) return;
  }
}

}  // namespace

void write_file_atomically(const std::string& path, std::string_view contents) {
  make_parents(path);
  // Same directory as the target: rename() is atomic only within one file system.
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("cannot create", tmp);
  std::size_t written = 0;
  while (written < contents.size()) {
    const ssize_t n = ::write(fd, contents.data() + written, contents.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int saved = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      errno = saved;
      fail("cannot write", tmp);
    }
    written += static_cast<std::size_t>(n);
  }
  if (::close(fd) != 0) {
    ::unlink(tmp.c_str());
    fail("cannot write", tmp);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int saved = errno;
    ::unlink(tmp.c_str());
    errno = saved;
    fail("cannot rename to", path);
  }
}

}  // namespace rankrun::worker
