#include "launcher/host/job_secret_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "launcher/base/launch_error.hpp"
#include "launcher/processes/unique_fd.hpp"

namespace rankrun::launcher {

std::optional<std::string> read_job_secret(const SecretSource& source) {
  const std::string file = "the job secret file " + source.path + " (" + source.origin + ")";
  // Not O_NOFOLLOW: secrets are often links (a mounted secret's ..data/); what is checked is
  // the file that was opened.
  const UniqueFd owned(::open(source.path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK));
  const int fd = owned.get();
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT && source.optional) return std::nullopt;
    throw LaunchError("cannot open " + file + ": " + std::strerror(err) +
                      (err == ENOENT ? "; give every node a file that holds the same secret" : ""));
  }
  struct stat st {};
  std::string contents;
  std::optional<std::string> problem;
  if (::fstat(fd, &st) != 0) {
    problem = "cannot stat " + file + ": " + std::strerror(errno);
  } else {
    const SecretFileFacts facts{S_ISREG(st.st_mode), static_cast<unsigned>(st.st_mode & 07777),
                                static_cast<unsigned long long>(st.st_size)};
    problem = secret_file_problem(source, facts);
  }
  if (!problem) {
    // One byte more than allowed: a file that grew since fstat is still caught.
    contents.resize(k_max_secret_file_bytes + 1);
    std::size_t got = 0;
    while (got < contents.size()) {
      const ssize_t n = ::read(fd, contents.data() + got, contents.size() - got);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        problem = "cannot read " + file + ": " + std::strerror(errno);
        break;
      }
      if (n == 0) break;
      got += static_cast<std::size_t>(n);
    }
    contents.resize(got);
    if (!problem) problem = secret_file_problem(source, SecretFileFacts{true, 0600, got});
  }
  std::string secret = secret_from_contents(std::move(contents));
  if (!problem && secret.empty()) problem = secret_file_problem(source, SecretFileFacts{true, 0600, 0});
  if (problem) throw LaunchError(*problem);
  return secret;
}

}  // namespace rankrun::launcher
