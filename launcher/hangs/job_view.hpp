#pragma once
// The deciding node's view of every rank of a multi-node job: its own ranks as it watches them,
// the other nodes' as their progress records say (cluster/progress.hpp). Pure: what the hang
// policy then decides on.

#include <optional>
#include <vector>

#include "launcher/cluster/progress.hpp"
#include "launcher/hangs/hang_policy.hpp"

namespace rankrun::launcher {

/// Another node's progress and when it was received.
struct ReceivedProgress {
  cluster::NodeProgress progress;
  HangTime received{};
};

/// Every rank of the job by global rank (0 .. world_size - 1): `local` (by local rank, their
/// global ranks in `global`) and each remote rank as its node said when `received` (it last moved
/// `still_seconds` before that; it started with the attempt, `attempt_started`). nullopt while a
/// rank of the job is in none of them: no verdict rests on a rank nobody has seen.
std::optional<std::vector<RankActivity>> job_activity(const std::vector<RankActivity>& local, const std::vector<int>& global,
                                                      const std::vector<ReceivedProgress>& remote, int world_size,
                                                      HangTime attempt_started);

}  // namespace rankrun::launcher
