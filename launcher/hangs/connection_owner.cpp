#include "launcher/hangs/connection_owner.hpp"

#include "launcher/config/options.hpp"

namespace rankrun::launcher {

int owner_of_connection(const SocketMapping& mapping, const std::string& peer_ip, std::uint16_t peer_port,
                        bool unmatched_rank_gone) {
  const auto in = mapping.inode_of.find({peer_ip, peer_port});
  if (in != mapping.inode_of.end()) {
    if (const auto r = mapping.rank_of_inode.find(in->second); r != mapping.rank_of_inode.end()) return r->second;
  }
  // The store accepted it, so its client end was in the table while its process held it. The
  // socket table is read before the fd tables: a worker that exits in between leaves its
  // connection in the one and not in the other.
  const bool closed_by_its_process = in == mapping.inode_of.end() || unmatched_rank_gone;
  return mapping.read && is_loopback_address(peer_ip) && closed_by_its_process ? k_connection_gone
                                                                               : k_connection_unknown;
}

}  // namespace rankrun::launcher
