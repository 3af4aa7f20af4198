#include "worker_runtime/shuffle.hpp"

#include <numeric>
#include <utility>

namespace rankrun::worker {

std::uint64_t SplitMix64::next() {
  std::uint64_t z = (m_state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

std::uint64_t SplitMix64::below(std::uint64_t bound) {
  // Reject the top sliver that would make small values more likely.
  const std::uint64_t threshold = (0 - bound) % bound;
  for (;;) {
    std::uint64_t r = next();
    if (r >= threshold) return r % bound;
  }
}

std::uint64_t mix_seed(std::uint64_t seed, std::uint64_t epoch, std::uint64_t stream) {
  SplitMix64 a(seed);
  std::uint64_t h = a.next();
  SplitMix64 b(h ^ epoch);
  h = b.next();
  SplitMix64 c(h ^ stream);
  return c.next();
}

void shuffle_in_place(std::vector<std::size_t>& items, SplitMix64& rng) {
  for (std::size_t i = items.size(); i > 1; --i) {
    std::size_t j = static_cast<std::size_t>(rng.below(i));
    std::swap(items[i - 1], items[j]);
  }
}

std::vector<std::size_t> shuffled_range(std::size_t n, std::uint64_t seed, std::uint64_t epoch, std::uint64_t stream) {
  std::vector<std::size_t> items(n);
  std::iota(items.begin(), items.end(), std::size_t{0});
  SplitMix64 rng(mix_seed(seed, epoch, stream));
  shuffle_in_place(items, rng);
  return items;
}

}  // namespace rankrun::worker
