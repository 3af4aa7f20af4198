#pragma once
// A permutation that every rank computes identically. std::shuffle is not used: its
// algorithm (and std::uniform_int_distribution's) differs between standard libraries, and
// two ranks built against different ones would silently disagree on the data order.

#include <cstddef>
#include <cstdint>
#include <vector>

namespace rankrun::worker {

/// splitmix64: tiny, fast, fully specified.
class SplitMix64 {
 public:
  explicit SplitMix64(std::uint64_t seed) : m_state(seed) {}
  std::uint64_t next();
  /// Uniform in [0, bound), `bound` > 0, without modulo bias.
  std::uint64_t below(std::uint64_t bound);

 private:
  std::uint64_t m_state;
};

/// Seed for one (seed, epoch, stream) triple; `stream` separates independent shuffles of
/// the same epoch.
std::uint64_t mix_seed(std::uint64_t seed, std::uint64_t epoch, std::uint64_t stream);

/// Fisher-Yates over `items` driven by `rng`.
void shuffle_in_place(std::vector<std::size_t>& items, SplitMix64& rng);

/// 0..n-1 shuffled by (seed, epoch, stream).
std::vector<std::size_t> shuffled_range(std::size_t n, std::uint64_t seed, std::uint64_t epoch, std::uint64_t stream);

}  // namespace rankrun::worker
