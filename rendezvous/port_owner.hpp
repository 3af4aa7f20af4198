#pragma once
// Which process owns a TCP socket, from /proc (Linux): names the squatter when our port is
// taken, and tells the launcher which worker opened a store connection.
// The parsing is pure (tested on sample text); the lookups read /proc and need permission to
// read other processes' /proc/PID/fd (same user or root), else they find nothing.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rankrun::rendezvous {

/// One line of /proc/net/tcp or /proc/net/tcp6. Addresses are printed the usual way
/// ("127.0.0.1", "::1"); IPv4-mapped IPv6 addresses are printed as plain IPv4 so that one
/// spelling matches a socket whichever family it was opened with.
struct TcpSocketEntry {
  std::string local_ip;
  std::uint16_t local_port = 0;
  std::string remote_ip;
  std::uint16_t remote_port = 0;
  /// Kernel TCP state: 0x0A is LISTEN, 0x01 ESTABLISHED.
  int state = 0;
  std::uint64_t inode = 0;
};

inline constexpr int k_tcp_listen = 0x0A;
inline constexpr int k_tcp_established = 0x01;

/// Parses the text of /proc/net/tcp (`ipv6` false) or /proc/net/tcp6 (`ipv6` true); the header
/// line and lines that do not parse are skipped.
std::vector<TcpSocketEntry> parse_proc_net_tcp(std::string_view text, bool ipv6);

/// Parses a /proc/PID/fd link target: "socket:[12345]" -> 12345.
std::optional<std::uint64_t> parse_socket_link(std::string_view link_target);

/// Canonical text of an address for comparisons: IPv4-mapped IPv6 becomes IPv4, IPv6 is
/// re-printed in its shortest form; text that is not an address comes back unchanged.
std::string canonical_ip(std::string_view ip);

/// Every TCP socket of this network namespace: /proc/net/tcp and /proc/net/tcp6, parsed (IPv4
/// first). Empty when /proc is not readable.
std::vector<TcpSocketEntry> read_tcp_sockets();

/// The inodes of the sockets that process `pid` holds open (its /proc/PID/fd links of the form
/// "socket:[N]"), sorted, each once. Empty when the process is gone or its fds are not
/// ours to read. With read_tcp_sockets() this maps many connections to pids in one pass.
std::vector<std::uint64_t> socket_inodes_of(int pid);
/// The same, or nothing when the process holds no file at all: it has exited (a zombie's fd
/// table is empty), was reaped, or is not ours to read. A live process has fds open.
std::optional<std::vector<std::uint64_t>> held_socket_inodes(int pid);

struct PortOwner {
  int pid = 0;
  /// /proc/PID/cmdline with NULs turned into spaces; empty when unreadable.
  std::string command_line;
  /// The address the listener is bound to ("0.0.0.0", "127.0.0.1", "::").
  std::string local_ip;
};

/// The process listening on TCP `port` (any address, IPv4 or IPv6), if it can be found.
std::optional<PortOwner> find_listener(std::uint16_t port);

/// The pid of a process holding the TCP socket whose own end is `local_ip:local_port` and whose
/// peer is `remote_ip:remote_port`. For a connection our server accepted from peer P, pass
/// (P's address, our address): that finds the client process. nullopt when no such socket is
/// visible (already closed, another network namespace, or no permission).
std::optional<int> pid_of_tcp_socket(const std::string& local_ip, std::uint16_t local_port,
                                     const std::string& remote_ip, std::uint16_t remote_port);

/// A pid holding socket `inode` (socket_inodes_of() every pid in /proc); the lowest pid when
/// several share it.
std::optional<int> pid_of_socket_inode(std::uint64_t inode);

}  // namespace rankrun::rendezvous
