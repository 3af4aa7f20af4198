#pragma once
// On a node of several, whether a rank's failure goes out to every node as the job's root cause
// now, or is held back a moment. Pure: the Job keeps the timers.
//
//   - its stderr is still open and was not read to the end yet: wait for its last lines (the
//     exception, the peer it lost), which go with the notice;
//   - its stderr (or, when it lost a connection itself, another local rank's) names a peer on
//     another node it lost: it is most likely a victim of that node's death; hold it until that
//     node's lease is known (a lost node's notice, or that node's own failure, comes first and
//     wins);
//   - otherwise it goes out now.

#include <deque>
#include <functional>
#include <string>

#include "launcher/cluster/records.hpp"

namespace rankrun::launcher {

enum class StopHold { PublishNow, ReadTail, AsVictim };

struct StopHoldDecision {
  StopHold hold = StopHold::PublishNow;
  int peer = -1;  // AsVictim: the node rank its failure names
};

/// `root`: the failed rank's local rank; `tail(i)`: local rank i's stderr tail (oldest first),
/// for i in [0, ranks); `map`, `my_node`: the round and this node's rank in it.
StopHoldDecision decide_stop_hold(int root, bool root_stderr_open, bool tail_read,
                                  const std::function<const std::deque<std::string>&(int local_rank)>& tail, int ranks,
                                  const cluster::NodeMap& map, int my_node);

/// A line of a worker's stderr tail that says it lost a connection to a peer (gloo, NCCL).
bool lost_a_connection(const std::deque<std::string>& tail);

}  // namespace rankrun::launcher
