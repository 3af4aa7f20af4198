#include "launcher/config/job_secret.hpp"

#include <cstdio>

namespace rankrun::launcher {

std::optional<SecretSource> choose_secret_source(const std::string& conf_secret_file, const EnvMap& env) {
  if (!conf_secret_file.empty()) return SecretSource{conf_secret_file, "--rdzv-conf secret_file=" + conf_secret_file, false};
  if (const auto it = env.find(k_secret_file_env); it != env.end() && !it->second.empty()) {
    return SecretSource{it->second, std::string(k_secret_file_env) + "=" + it->second, false};
  }
  if (const auto it = env.find("CREDENTIALS_DIRECTORY"); it != env.end() && !it->second.empty()) {
    const std::string path = it->second + "/" + k_secret_credential;
    return SecretSource{path, std::string("systemd's credential ") + k_secret_credential + " (" + path + ")", true};
  }
  return std::nullopt;
}

std::optional<std::string> secret_file_problem(const SecretSource& source, const SecretFileFacts& facts) {
  const std::string file = "the job secret file " + source.path + " (" + source.origin + ")";
  if (!facts.regular) return file + " is not a regular file; give a file that holds the secret";
  if ((facts.mode & 077u) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", facts.mode & 07777u);
    return file + " can be read or written by others than its owner (mode " + mode + "); chmod 600 " + source.path;
  }
  if (facts.size == 0) {
    return file + " is empty; put the secret in it, e.g. (umask 077; openssl rand -hex 32 > " + source.path + ")";
  }
  if (facts.size > k_max_secret_file_bytes) {
    return file + " has " + std::to_string(facts.size) + " bytes, more than a secret needs (at most " +
           std::to_string(k_max_secret_file_bytes) + "); give a file of a few dozen random bytes";
  }
  return std::nullopt;
}

std::string secret_from_contents(std::string contents) {
  while (!contents.empty() && (contents.back() == '\n' || contents.back() == '\r')) contents.pop_back();
  return contents;
}

std::string no_secret_warning(const std::string& store_endpoint) {
  return "this job has no job secret: anyone who can reach the store host " + store_endpoint +
         " can stop the job, join it as a node, and read and write its rendezvous records (its nodes, leases and "
         "stop notices); give every node the same secret with --rdzv-conf secret_file=PATH or " +
         std::string(k_secret_file_env) + "=PATH (a file only its owner can read, e.g. made with (umask 077; openssl " +
         "rand -hex 32 > PATH))";
}

}  // namespace rankrun::launcher
