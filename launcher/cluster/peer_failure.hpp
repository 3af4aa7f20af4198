#pragma once
// A worker's failure that names a peer of another node: gloo's "Connection closed by peer
// [10.0.0.3]:41234" and "Read error [10.0.0.3]:41234: Connection reset by peer", NCCL's
// "Connection closed by remote peer 10.0.0.3<41234>". When a node dies while collectives run,
// every other node's workers fail like this at once, long before the dead node's lease lapses:
// they are its victims, not the job's root cause. The Job holds such a failure back until that
// node's lease is known (a lost node's notice wins; a live node's own failure wins).

#include <deque>
#include <optional>
#include <string>

#include "launcher/cluster/records.hpp"

namespace rankrun::launcher::cluster {

/// The node (other than `self`) whose address a connection-loss line of `stderr_tail` names,
/// the last such line deciding; nullopt when no line does.
std::optional<int> peer_node_named(const std::deque<std::string>& stderr_tail, const NodeMap& map, int self);

}  // namespace rankrun::launcher::cluster
