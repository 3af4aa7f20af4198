#pragma once
// The hang report: a line per rank (its state, where it waits, its last collective and store
// key), then a one-line verdict. Pure.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "launcher/types/exit_status.hpp"
#include "launcher/hangs/hang_policy.hpp"
#include "launcher/hangs/stack_dump.hpp"
#include "launcher/report/arrival.hpp"

namespace rankrun::launcher {

/// The worker runtime's record of the collective a rank is in (rankrun/coll/<rank>).
struct CollectiveState {
  std::string kind;  // barrier, all_gather, broadcast
  std::uint64_t seq = 0;
  bool inside = false;  // entered and not yet left
  std::string name;
};

/// How far a rank read its data in an epoch, as rankrun.data told rankrun.
struct RankBatches {
  std::uint64_t epoch = 0;
  std::uint64_t read = 0;
  std::uint64_t planned = 0;
};

struct RankHangState {
  int rank = 0;
  bool alive = true;
  std::optional<ExitStatus> status;
  std::optional<double> heartbeat_age;  // seconds since its last heartbeat
  std::optional<std::int64_t> step;
  std::optional<CollectiveState> collective;
  std::string last_key;             // the last store key it touched
  std::optional<WaitPoint> wait;    // from its stack dump
  std::string sampled_in;           // its sampler's: the collective it is in ("" none)
  std::string sampled_at;           // its sampler's: the user's innermost frame
  std::optional<double> still_for;  // seconds since it last moved
  std::optional<Arrival> arrival;   // how far it got in rankrun's store (none: not known here)
  std::string collectives;          // its flight recorder's word ("all_reduce #12 not completed"), "" none
  std::optional<int> node;          // another node's rank: its stack is in that node's log
  bool stack_dumped = false;
  std::optional<RankBatches> batches;  // rankrun.data's count, when it was used
  std::string section;                 // "section 'checkpoint' for 412s of 900s" while inside one
};

/// A sampler's call as reports name it: a backward pass with a process group up is DDP's
/// gradient all-reduce ("backward" -> "DDP backward (gradient all-reduce)"); others as they are.
std::string call_name(const std::string& in);

/// One line per rank, e.g. "rank 1: running, in all_reduce at train.py:12 in main; runtime:
/// all_gather #42 (inside); heartbeat 3s ago, step 41; last store key rankrun/coll/1".
std::string format_rank_states(const std::vector<RankHangState>& ranks);

/// One sentence that names the likely cause, e.g. "rank 1 is in all_reduce while rank 0 exited 0:
/// uneven inputs? Every rank must run the same collectives."
std::string hang_verdict(const HangFinding& finding, const std::vector<RankHangState>& ranks);

/// One sentence on the ranks' data, for hangs where ranks ran different numbers of collectives:
/// each rank's batch count when rankrun.data reported one ("batches read in epoch 0: rank 0 12 of
/// 12, ranks 1-3 8 of 12"), otherwise the fix (rankrun.data.even_batches); "" when the hang is
/// not of that kind.
std::string data_note(const HangFinding& finding, const std::vector<RankHangState>& ranks);

}  // namespace rankrun::launcher
