#include "launcher/config/job_secret.hpp"

#include <cstdio>

namespace rankrun::launcher {

std::optional<SecretSource> choose_secret_source(const std::string& conf_secret_file, const EnvMap& env) {
  if (!conf_secret_file.empty())
    return SecretSource{conf_secret_file, "--rdzv-conf secret_file=" + conf_secret_file, false};
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

namespace {
constexpr std::string_view k_munge_payload_type = "rankrun-job-secret/1";
constexpr char k_hex[] = "0123456789abcdef";
}  // namespace

std::string munge_secret_payload(std::string_view run_id, std::string_view secret) {
  std::string out(k_munge_payload_type);
  out += '\n';
  out += run_id;
  out += '\n';
  for (unsigned char c : secret) {
    out.push_back(k_hex[c >> 4]);
    out.push_back(k_hex[c & 15]);
  }
  return out;
}

std::optional<std::string> secret_from_munge_payload(std::string_view payload, std::string_view run_id,
                                                     std::string& why) {
  const auto first = payload.find('\n');
  const auto second = first == std::string_view::npos ? first : payload.find('\n', first + 1);
  if (second == std::string_view::npos || payload.substr(0, first) != k_munge_payload_type) {
    why = "it carries no job secret of rankrun's";
    return std::nullopt;
  }
  const auto run = payload.substr(first + 1, second - first - 1);
  if (run != run_id) {
    why = "it was made for run " + std::string(run) + ", not for this one (" + std::string(run_id) + ")";
    return std::nullopt;
  }
  const auto hex = payload.substr(second + 1);
  const auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  std::string secret;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2) {
    const int hi = nibble(hex[i]);
    const int lo = nibble(hex[i + 1]);
    if (hi < 0 || lo < 0) break;
    secret.push_back(static_cast<char>(hi << 4 | lo));
  }
  if (secret.empty() || secret.size() * 2 != hex.size()) {
    why = "its secret is not readable";
    return std::nullopt;
  }
  return secret;
}

std::optional<std::string> munge_socket_in_slurm_config(std::string_view text) {
  std::size_t start = 0;
  while (start < text.size()) {
    auto end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    auto line = text.substr(start, end - start);
    start = end + 1;
    if (line.substr(0, 8) != "AuthInfo") continue;
    const auto eq = line.find('=');
    if (eq == std::string_view::npos) continue;
    auto options = line.substr(eq + 1);
    // "socket=/run/munge/munge.socket.2" among comma-separated options, maybe after blanks.
    std::size_t at = 0;
    while (at < options.size()) {
      auto comma = options.find(',', at);
      if (comma == std::string_view::npos) comma = options.size();
      auto option = options.substr(at, comma - at);
      at = comma + 1;
      while (!option.empty() && (option.front() == ' ' || option.front() == '\t')) option.remove_prefix(1);
      while (!option.empty() && (option.back() == ' ' || option.back() == '\t' || option.back() == '\r'))
        option.remove_suffix(1);
      if (option.substr(0, 7) == "socket=" && option.size() > 7) return std::string(option.substr(7));
    }
  }
  return std::nullopt;
}

std::string no_secret_warning(const std::string& store_endpoint) {
  return "this job has no job secret: anyone who can reach the store host " + store_endpoint +
         " can stop the job, join it as a node, and read and write its rendezvous records (its nodes, leases and "
         "stop notices); give every node the same secret with --rdzv-conf secret_file=PATH or " +
         std::string(k_secret_file_env) + "=PATH (a file only its owner can read, e.g. made with (umask 077; openssl " +
         "rand -hex 32 > PATH))";
}

}  // namespace rankrun::launcher
