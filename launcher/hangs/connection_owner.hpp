#pragma once
// Which worker holds the client end of a store connection, from one look at the socket table
// and the workers' fd tables. Pure: the store watch reads /proc.

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace rankrun::launcher {

/// Client ends of connections to the store, and the workers' sockets, as read at one look.
struct SocketMapping {
  bool read = false;                                                        // the socket table was read
  std::map<std::pair<std::string, std::uint16_t>, std::uint64_t> inode_of;  // (address, port) -> inode
  std::unordered_map<std::uint64_t, int> rank_of_inode;                     // -> local rank
  std::vector<int> gone;  // local ranks that held no file when their fds were read: exited
};

inline constexpr int k_connection_gone = -3;     // its process closed it or exited: rank unknown
inline constexpr int k_connection_unknown = -1;  // not a worker's

/// The local rank holding the client end at `peer_ip`:`peer_port`, or k_connection_unknown, or
/// k_connection_gone. Gone is a connection from this host (loopback) that no live worker holds
/// while its client end has left the socket table, or while a worker not yet matched to any
/// connection had exited (`unmatched_rank_gone`): a rank that connected and exited between two
/// looks, whose close the store sees a moment later.
int owner_of_connection(const SocketMapping& mapping, const std::string& peer_ip, std::uint16_t peer_port,
                        bool unmatched_rank_gone);

}  // namespace rankrun::launcher
