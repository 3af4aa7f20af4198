#include "rendezvous/port_owner.hpp"

#include "base/parse_number.hpp"
#include "base/read_file.hpp"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <iterator>

namespace rankrun::rendezvous {
namespace {

std::vector<std::string_view> split_blanks(std::string_view line) {
  std::vector<std::string_view> out;
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    const std::size_t start = i;
    while (i < line.size() && line[i] != ' ' && line[i] != '\t') ++i;
    if (i > start) out.push_back(line.substr(start, i - start));
  }
  return out;
}

std::string ipv4_text(const in_addr& addr) {
  std::array<char, INET_ADDRSTRLEN> buf{};
  return inet_ntop(AF_INET, &addr, buf.data(), buf.size()) != nullptr ? std::string(buf.data()) : std::string();
}

std::string ipv6_text(const in6_addr& addr) {
  if (IN6_IS_ADDR_V4MAPPED(&addr)) {
    in_addr v4{};
    std::memcpy(&v4, addr.s6_addr + 12, 4);
    return ipv4_text(v4);
  }
  std::array<char, INET6_ADDRSTRLEN> buf{};
  return inet_ntop(AF_INET6, &addr, buf.data(), buf.size()) != nullptr ? std::string(buf.data()) : std::string();
}

// The kernel prints each 32-bit word of the address as the number it is in host memory, so
// copying the parsed words back into memory restores the network-order bytes.
bool parse_endpoint(std::string_view text, bool ipv6, std::string& ip, std::uint16_t& port) {
  const auto colon = text.find(':');
  if (colon == std::string_view::npos) return false;
  const auto addr = text.substr(0, colon);
  if (!parse_number(text.substr(colon + 1), port, 16)) return false;
  if (!ipv6) {
    std::uint32_t word = 0;
    if (addr.size() != 8 || !parse_number(addr, word, 16)) return false;
    in_addr a{};
    std::memcpy(&a.s_addr, &word, 4);
    ip = ipv4_text(a);
    return !ip.empty();
  }
  if (addr.size() != 32) return false;
  in6_addr a{};
  for (int i = 0; i < 4; ++i) {
    std::uint32_t word = 0;
    if (!parse_number(addr.substr(static_cast<std::size_t>(i) * 8, 8), word, 16)) return false;
    std::memcpy(a.s6_addr + i * 4, &word, 4);
  }
  ip = ipv6_text(a);
  return !ip.empty();
}

// /proc/net/tcp holds a line of 150 bytes a socket: room for ~400,000 sockets.
constexpr std::size_t k_max_socket_table = 64 << 20;

std::string socket_table(const char* path) { return read_file_head(path, k_max_socket_table).value_or(""); }

}  // namespace

std::vector<TcpSocketEntry> parse_proc_net_tcp(std::string_view text, bool ipv6) {
  std::vector<TcpSocketEntry> out;
  std::size_t start = 0;
  while (start < text.size()) {
    auto end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    const auto fields = split_blanks(text.substr(start, end - start));
    start = end + 1;
    // sl local remote st tx:rx tr:when retrnsmt uid timeout inode ...
    if (fields.size() < 10 || fields[0].empty() || fields[0].back() != ':') continue;
    TcpSocketEntry entry;
    if (!parse_endpoint(fields[1], ipv6, entry.local_ip, entry.local_port)) continue;
    if (!parse_endpoint(fields[2], ipv6, entry.remote_ip, entry.remote_port)) continue;
    if (!parse_number(fields[3], entry.state, 16)) continue;
    if (!parse_number(fields[9], entry.inode)) continue;
    out.push_back(std::move(entry));
  }
  return out;
}

std::optional<std::uint64_t> parse_socket_link(std::string_view link_target) {
  constexpr std::string_view k_prefix = "socket:[";
  if (link_target.size() <= k_prefix.size() + 1 || link_target.substr(0, k_prefix.size()) != k_prefix ||
      link_target.back() != ']')
    return std::nullopt;
  const auto digits = link_target.substr(k_prefix.size(), link_target.size() - k_prefix.size() - 1);
  return parse_number<std::uint64_t>(digits);
}

std::string canonical_ip(std::string_view ip) {
  const std::string text(ip);
  in_addr v4{};
  if (inet_pton(AF_INET, text.c_str(), &v4) == 1) return ipv4_text(v4);
  in6_addr v6{};
  if (inet_pton(AF_INET6, text.c_str(), &v6) == 1) return ipv6_text(v6);
  return text;
}

std::vector<TcpSocketEntry> read_tcp_sockets() {
  auto v4 = parse_proc_net_tcp(socket_table("/proc/net/tcp"), false);
  auto v6 = parse_proc_net_tcp(socket_table("/proc/net/tcp6"), true);
  v4.insert(v4.end(), std::make_move_iterator(v6.begin()), std::make_move_iterator(v6.end()));
  return v4;
}

std::optional<std::vector<std::uint64_t>> held_socket_inodes(int pid) {
  if (pid <= 0) return std::nullopt;
  const std::string fd_dir = "/proc/" + std::to_string(pid) + "/fd";
  DIR* fds = opendir(fd_dir.c_str());
  if (fds == nullptr) return std::nullopt;  // gone, or not ours to look at
  std::vector<std::uint64_t> inodes;
  bool any = false;
  std::string link = fd_dir + "/";
  const std::size_t base = link.size();
  std::array<char, 64> target{};
  while (dirent* fd = readdir(fds)) {
    if (fd->d_name[0] == '.') continue;
    any = true;
    link.resize(base);
    link += fd->d_name;
    const ssize_t n = readlink(link.c_str(), target.data(), target.size());
    if (n <= 0) continue;
    auto inode = parse_socket_link(std::string_view(target.data(), static_cast<std::size_t>(n)));
    if (inode) inodes.push_back(*inode);
  }
  closedir(fds);
  if (!any) return std::nullopt;
  // dup()ed descriptors share one socket: list it once.
  std::sort(inodes.begin(), inodes.end());
  inodes.erase(std::unique(inodes.begin(), inodes.end()), inodes.end());
  return inodes;
}

std::vector<std::uint64_t> socket_inodes_of(int pid) {
  return held_socket_inodes(pid).value_or(std::vector<std::uint64_t>{});
}

std::optional<int> pid_of_socket_inode(std::uint64_t inode) {
  if (inode == 0) return std::nullopt;  // sockets in TIME_WAIT belong to no one
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return std::nullopt;
  std::optional<int> found;
  while (dirent* entry = readdir(proc)) {
    const auto pid = parse_number<int>(entry->d_name);  // /proc's processes: the names that are numbers
    if (!pid || *pid <= 0 || (found && *pid >= *found)) continue;
    const auto inodes = socket_inodes_of(*pid);
    if (std::binary_search(inodes.begin(), inodes.end(), inode)) found = *pid;
  }
  closedir(proc);
  return found;
}

std::optional<PortOwner> find_listener(std::uint16_t port) {
  for (const auto& entry : read_tcp_sockets()) {
    if (entry.state != k_tcp_listen || entry.local_port != port) continue;
    auto pid = pid_of_socket_inode(entry.inode);
    if (!pid) continue;
    return PortOwner{*pid, command_line_of(*pid).value_or(""), entry.local_ip};
  }
  return std::nullopt;
}

std::optional<int> pid_of_tcp_socket(const std::string& local_ip, std::uint16_t local_port,
                                     const std::string& remote_ip, std::uint16_t remote_port) {
  const auto local = canonical_ip(local_ip);
  const auto remote = canonical_ip(remote_ip);
  for (const auto& entry : read_tcp_sockets()) {
    if (entry.state == k_tcp_listen || entry.local_port != local_port || entry.remote_port != remote_port) continue;
    if (entry.local_ip != local || entry.remote_ip != remote) continue;
    if (auto pid = pid_of_socket_inode(entry.inode)) return pid;
  }
  return std::nullopt;
}

}  // namespace rankrun::rendezvous
