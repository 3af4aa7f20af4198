#pragma once
// How far each rank got in the store rendezvous, and the one line that says so. Pure.

#include <optional>
#include <string>
#include <vector>

#include "launcher/report/rank_claims.hpp"

namespace rankrun::launcher {

enum class Arrival {
  NeverConnected,  // no store connection from this rank
  Connected,       // connected, but never joined the rendezvous
  Rendezvoused,    // joined init_process_group's rendezvous (ADD "init/")
};

/// Store connections that closed before they were matched to a rank (a rank that connected and
/// exited between two of the watch's looks): their rank is not known.
struct UnmatchedConnections {
  int connected = 0;     // no init_process_group rendezvous on them
  int rendezvoused = 0;  // they joined it
};

/// "ranks 0-2 reached init_process_group; rank 3 never connected". Empty when no rank ever
/// connected (a job that doesn't use the store). With `duplicate` (two workers registered the
/// same rank there), it is said, and the ranks are not "all ranks" that reached it. With
/// `unmatched` connections, the ranks without one are "not matched to a connection", not "never
/// connected": one of them may have been the rank behind the closed connection.
std::string describe_arrivals(const std::vector<Arrival>& by_rank,
                              const std::optional<DuplicateRank>& duplicate = std::nullopt,
                              const UnmatchedConnections& unmatched = {});

/// "rank 3", "ranks 0-2,5" (the worker runtime's rank-list format).
std::string ranks_text(const std::vector<int>& ranks);

}  // namespace rankrun::launcher
