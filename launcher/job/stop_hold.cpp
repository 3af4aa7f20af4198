#include "launcher/job/stop_hold.hpp"

#include "launcher/cluster/peer_failure.hpp"

namespace rankrun::launcher {

bool lost_a_connection(const std::deque<std::string>& tail) {
  for (const auto& line : tail) {
    if (line.find("Connection closed by") != std::string::npos ||
        line.find("Connection reset by peer") != std::string::npos) {
      return true;
    }
  }
  return false;
}

StopHoldDecision decide_stop_hold(int root, bool root_stderr_open, bool tail_read,
                                  const std::function<const std::deque<std::string>&(int local_rank)>& tail, int ranks,
                                  const cluster::NodeMap& map, int my_node) {
  if (root_stderr_open && !tail_read) return {StopHold::ReadTail, -1};
  const auto& own = tail(root);
  auto peer = cluster::peer_node_named(own, map, my_node);
  if (!peer && lost_a_connection(own)) {
    // It lost a peer on this node, which died first: if that one (or another rank here) lost a
    // peer on another node, this is the same node's death, one step further.
    for (int i = 0; i < ranks && !peer; ++i) {
      if (i != root) peer = cluster::peer_node_named(tail(i), map, my_node);
    }
  }
  if (peer) return {StopHold::AsVictim, *peer};
  return {StopHold::PublishNow, -1};
}

}  // namespace rankrun::launcher
