#include "launcher/observe/status_client.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>
#include <spdlog/spdlog.h>

#include "launcher/types/exit_code.hpp"
#include "launcher/observe/status_server.hpp"
#include "base/unique_fd.hpp"

namespace rankrun::launcher::observe {

namespace {

constexpr int k_answer_timeout_ms = 10000;
constexpr std::size_t k_max_answer = 16u << 20;

// A connection to status.sock in `dir`, or nullopt (none there, not ours, or nobody answers).
std::optional<UniqueFd> connect_to(const std::string& dir) {
  UniqueFd dir_fd(::open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!dir_fd) return std::nullopt;
  struct stat st {};
  if (::fstatat(dir_fd.get(), k_status_socket, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISSOCK(st.st_mode))
    return std::nullopt;
  if (st.st_uid != ::getuid() && ::getuid() != 0) return std::nullopt;
  UniqueFd sock(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!sock) return std::nullopt;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const auto path = socket_path_through(dir_fd.get());
  if (path.size() >= sizeof addr.sun_path) return std::nullopt;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  if (::connect(sock.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) return std::nullopt;
  return sock;
}

std::optional<std::string> ask(UniqueFd& sock, const std::string& request) {
  const std::string line = request + "\n";
  if (::send(sock.get(), line.data(), line.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(line.size()))
    return std::nullopt;
  std::string answer;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(k_answer_timeout_ms);
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return std::nullopt;
    pollfd p{sock.get(), POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return std::nullopt;
    char buf[65536];
    const ssize_t n = ::read(sock.get(), buf, sizeof buf);
    if (n < 0) return std::nullopt;
    if (n == 0) break;
    answer.append(buf, static_cast<std::size_t>(n));
    if (answer.size() > k_max_answer) return std::nullopt;
  }
  return answer;
}

// The run directories under `place` that hold a status socket: rankrun-* (a private run
// directory) and <run id>_* (under --log-dir).
std::vector<std::string> candidates(const std::string& place) {
  std::vector<std::string> out;
  std::error_code ec;
  if (std::filesystem::exists(std::filesystem::path(place) / k_status_socket, ec)) out.push_back(place);
  for (const auto& entry : std::filesystem::directory_iterator(place, ec)) {
    std::error_code ec2;
    if (!entry.is_directory(ec2)) continue;
    if (std::filesystem::exists(entry.path() / k_status_socket, ec2)) out.push_back(entry.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

int run_status_command(const StatusRequest& request) {
  std::string place;
  if (request.dir) {
    place = *request.dir;
  } else {
    const char* tmp = std::getenv("TMPDIR");
    place = tmp && *tmp ? tmp : "/tmp";
  }
  std::vector<std::pair<std::string, UniqueFd>> live;
  for (const auto& d : candidates(place)) {
    if (auto sock = connect_to(d)) live.emplace_back(d, std::move(*sock));
  }
  if (live.empty()) {
    spdlog::error(
        "status: no running rankrun job of yours in {}; give the job's --log-dir or run directory "
        "(rankrun status DIR)",
        place);
    return 1;
  }
  if (live.size() > 1) {
    std::string list;
    for (auto& [d, sock] : live) {
      const auto answer = ask(sock, "status");
      const auto first = answer ? answer->substr(0, answer->find('\n')) : std::string("(no answer)");
      list += "\n  rankrun status " + d + "    # " + first;
    }
    spdlog::error("status: {} running jobs in {}; choose one:{}", live.size(), place, list);
    return exit_code(JobEnding::ended_early(EarlyEnd::Usage));
  }
  const auto answer = ask(live.front().second, request.json ? "status json" : "status");
  if (!answer || answer->empty()) {
    spdlog::error("status: the job in {} did not answer within {} s", live.front().first, k_answer_timeout_ms / 1000);
    return 1;
  }
  std::fwrite(answer->data(), 1, answer->size(), stdout);
  return 0;
}

}  // namespace rankrun::launcher::observe
