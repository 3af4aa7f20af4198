#include "launcher/host/job_secret_file.hpp"

#include <cerrno>
#include <cstring>

#include "launcher/types/launch_error.hpp"
#include "base/read_file.hpp"

namespace rankrun::launcher {

std::optional<std::string> read_job_secret(const SecretSource& source) {
  const std::string file = "the job secret file " + source.path + " (" + source.origin + ")";
  // Not O_NOFOLLOW: secrets are often links (a mounted secret's ..data/); what is checked is
  // the file that was opened.
  auto read = read_file(source.path, k_max_secret_file_bytes, true);
  if (!read.opened) {
    const int err = read.error;
    if (err == ENOENT && source.optional) return std::nullopt;
    throw LaunchError("cannot open " + file + ": " + std::strerror(err) +
                      (err == ENOENT ? "; give every node a file that holds the same secret" : ""));
  }
  std::optional<std::string> problem;
  if (!read.ok()) {
    problem = "cannot read " + file + ": " + std::strerror(read.error);
  } else {
    // One byte more than allowed stands for a longer file.
    const auto size = read.truncated ? k_max_secret_file_bytes + 1 : read.text.size();
    problem = secret_file_problem(source, SecretFileFacts{read.regular, read.mode, size});
  }
  auto contents = std::move(read.text);
  std::string secret = secret_from_contents(std::move(contents));
  if (!problem && secret.empty()) problem = secret_file_problem(source, SecretFileFacts{true, 0600, 0});
  if (problem) throw LaunchError(*problem);
  return secret;
}

}  // namespace rankrun::launcher
