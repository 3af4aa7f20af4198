#pragma once
// The deciding node's view of every rank of a multi-node job: its own ranks as it watches them,
// the other nodes' as their progress records say (cluster/progress.hpp). Pure: what the hang
// policy then decides on.

#include <optional>
#include <vector>

#include "launcher/cluster/progress.hpp"
#include "launcher/hangs/flight_match.hpp"
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
std::optional<std::vector<RankActivity>> job_activity(const std::vector<RankActivity>& local,
                                                      const std::vector<int>& global,
                                                      const std::vector<ReceivedProgress>& remote, int world_size,
                                                      HangTime attempt_started);

/// What another node's summary tells of a rank's collectives, as a flight recorder dump for the
/// matcher: each group's counts and the op of the collective it waits in (its sizes and dtypes
/// are in that node's own dumps); nullopt when the summary has no groups (no recorder).
std::optional<FlightDump> summary_flight(const cluster::RankProgress& rank);

}  // namespace rankrun::launcher
