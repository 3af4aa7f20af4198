#pragma once
// A node's word on its ranks' progress, for the node that decides hangs for the whole job
// (node rank 0 of the round): what each rank is in, where, since when it has not moved, and its
// process groups' collectives as torch's flight recorder counts them. Each node rewrites
// progress/<attempt>/<node rank> in the agents' key space at every look at its ranks (at most
// every 5 s); the decider reads every node's. Pure: the record's text form (bounded), and what
// the decider makes of it.
//
//   rankrun-progress/1
//   node=1
//   attempt=0
//   seq=12
//   rank=8<TAB>1<TAB>-<TAB>9500<TAB>all_reduce<TAB>train.py:12 in step
//   group=8<TAB>0<TAB>1042<TAB>-1<TAB>1041<TAB>gloo:all_reduce<TAB>default_pg
//
// rank=: global rank, alive (1/0), exit code ("-": running or killed), milliseconds since it
// last moved, the call it is in ("-": none), where its main thread is ("-": unknown).
// group=: global rank, group name, last enqueued, started, completed, the pending collective's
// op and group description ("-": none).

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "launcher/cluster/rank_sample.hpp"

namespace rankrun::launcher::cluster {

struct RankProgress {
  int rank = 0;
  bool alive = true;
  std::optional<int> exit_code;
  double still_seconds = 0;  // since it last moved, when the node looked
  std::string in;
  std::string at;
  std::vector<GroupProgress> groups;
};

struct NodeProgress {
  int node_rank = 0;
  int attempt = 0;
  std::uint64_t seq = 0;  // the node's look; a node whose seq stops changing is not looking
  std::vector<RankProgress> ranks;
};

/// At most this many groups per rank go into a record (the pending ones first).
inline constexpr std::size_t k_max_groups_per_rank = 8;
/// A record's bound: 8 ranks with 8 groups each fit in a few KiB.
inline constexpr std::size_t k_max_progress_record = 32 * 1024;

std::string progress_key(int attempt, int node_rank);

/// Bounded by k_max_progress_record: groups are left out first, then ranks' `at`.
std::string encode(const NodeProgress& p);
std::optional<NodeProgress> decode_progress(std::string_view text);

}  // namespace rankrun::launcher::cluster
