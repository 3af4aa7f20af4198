#pragma once
// What a Python worker's sampler (sitecustomize.py) says about its main thread, and what
// rankrun concludes from two of its samples: whether the rank moved. Pure.
//
// A sample is text, rewritten in place once per interval:
//   rankrun-sample 1 / seq N / time T / changed T / main_cpu S / cpu S / in CALL / at WHERE / end N
// times are CLOCK_MONOTONIC seconds (the launcher's steady clock), CPU times are seconds, `in`
// is the torch.distributed call the main thread is inside ("backward" in a backward pass with a
// process group up, "DDP forward" in DDP's own communication, "-" for none) and `at` the user's
// innermost frame ("train.py:12 in main"). Under torch 2.x, with its flight recorder on, a line
// per process group follows `at`:
//   pg NAME ENQUEUED STARTED COMPLETED OP DESC
// the sequence ids of the group's last collective enqueued, started on the device (-1: the
// backend does not say, gloo) and completed, and the pending collective's op ("nccl:all_reduce")
// and group description ("default_pg"), "-" when none is pending. A torn read (the writer
// mid-rewrite) fails the seq/end check and is ignored.

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rankrun::launcher {

/// One process group's collectives, as torch's flight recorder counts them.
struct GroupProgress {
  std::string name;             // torch's group name ("0" is the default group)
  std::int64_t enqueued = -1;   // sequence id of the last collective enqueued
  std::int64_t started = -1;    // ... started on the device (-1: not said)
  std::int64_t completed = -1;  // ... completed
  std::string op;               // the pending collective's profiling name ("gloo:all_reduce"); "" none
  std::string desc;             // the pending collective's group description ("default_pg"); "" unknown
  /// Sequence ids start at 1; a group that completed none says -1.
  bool pending() const { return enqueued > std::max<std::int64_t>(completed, 0); }
  /// The first collective not completed.
  std::int64_t first_pending() const { return std::max<std::int64_t>(completed, 0) + 1; }
  bool operator==(const GroupProgress&) const = default;
};

struct RankSample {
  std::uint64_t seq = 0;
  double time = 0;                    // when it was taken
  double changed = 0;                 // when the main thread's stack last changed
  double main_cpu = 0;                // the main thread's CPU seconds (< 0: unknown)
  double cpu = 0;                     // the process's CPU seconds, all threads
  std::string in;                     // "" when in no collective
  std::string at;                     // "" when no frame of the user's is on the stack
  std::vector<GroupProgress> groups;  // empty without a flight recorder
};

std::optional<RankSample> parse_rank_sample(std::string_view text);

/// A rank moves when its main thread's stack changes, or when it uses CPU: at least
/// k_main_cpu_share of a core on its main thread, or k_process_cpu_share on all its threads
/// (a large gloo collective runs on gloo's threads while the main thread waits).
inline constexpr double k_main_cpu_share = 0.02;
inline constexpr double k_process_cpu_share = 0.10;

/// When the rank last moved, given the sample before (if any) and this one; in the samples'
/// clock (seconds). A collective that completes or is enqueued is movement. While a collective
/// on the GPU (NCCL) is pending and nothing completes, CPU is not: the host thread that waits for
/// the GPU spins.
double last_moved(const std::optional<RankSample>& before, const RankSample& now);

/// True when `now` has an NCCL collective pending and no group completed a collective since
/// `before`: the rank waits for its GPU, and its CPU use is the waiting host thread's.
bool waits_on_device(const std::optional<RankSample>& before, const RankSample& now);

/// The pending collective the rank waits in, as "all_reduce #1042" ("all_reduce #3 of group 1"
/// for another group than the default); "" when none is pending.
std::string pending_collective(const RankSample& s);

/// The call the rank waits in: its stack's ("all_reduce", "backward"), else the pending
/// collective of its flight recorder ("all_reduce #1042"); "" none.
std::string waits_in(const RankSample& s);

/// What the flight recorder says of the rank's groups, for the hang report: "all_reduce #12
/// not completed" for each pending collective, else "last completed #11"; "" without a recorder.
std::string describe_collectives(const RankSample& s);

/// The op of a profiling name without its backend: "nccl:all_reduce" -> "all_reduce".
std::string op_name(const std::string& profiling_name);

}  // namespace rankrun::launcher
