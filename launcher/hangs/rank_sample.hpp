#pragma once
// What a Python worker's sampler (sitecustomize.py) says about its main thread, and what
// rankrun concludes from two of its samples: whether the rank moved. Pure.
//
// A sample is text, rewritten in place once per interval:
//   rankrun-sample 1 / seq N / time T / changed T / main_cpu S / cpu S / in CALL / at WHERE / end N
// times are CLOCK_MONOTONIC seconds (the launcher's steady clock), CPU times are seconds, `in`
// is the torch.distributed call the main thread is inside ("backward" in a backward pass with a
// process group up, "DDP forward" in DDP's own communication, "-" for none) and `at` the user's
// innermost frame ("train.py:12 in main"). A torn read (the writer mid-rewrite) fails the
// seq/end check and is ignored.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace rankrun::launcher {

struct RankSample {
  std::uint64_t seq = 0;
  double time = 0;      // when it was taken
  double changed = 0;   // when the main thread's stack last changed
  double main_cpu = 0;  // the main thread's CPU seconds (< 0: unknown)
  double cpu = 0;       // the process's CPU seconds, all threads
  std::string in;       // "" when in no collective
  std::string at;       // "" when no frame of the user's is on the stack
};

std::optional<RankSample> parse_rank_sample(std::string_view text);

/// A rank moves when its main thread's stack changes, or when it uses CPU: at least
/// k_main_cpu_share of a core on its main thread, or k_process_cpu_share on all its threads
/// (a large gloo collective runs on gloo's threads while the main thread waits).
inline constexpr double k_main_cpu_share = 0.02;
inline constexpr double k_process_cpu_share = 0.10;

/// When the rank last moved, given the sample before (if any) and this one; in the samples'
/// clock (seconds).
double last_moved(const std::optional<RankSample>& before, const RankSample& now);

}  // namespace rankrun::launcher
