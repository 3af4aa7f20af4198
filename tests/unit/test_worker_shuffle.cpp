#include <doctest/doctest.h>

#include <algorithm>
#include <map>

#include "worker_runtime/shuffle.hpp"

using namespace rankrun::worker;

TEST_CASE("below() stays in range and hits every value") {
  SplitMix64 rng(1);
  for (std::uint64_t bound : {1ULL, 2ULL, 3ULL, 7ULL, 1000ULL}) {
    std::map<std::uint64_t, int> seen;
    for (int i = 0; i < 5000; ++i) {
      auto v = rng.below(bound);
      REQUIRE(v < bound);
      ++seen[v];
    }
    if (bound <= 7) CHECK(seen.size() == bound);
  }
}

TEST_CASE("shuffled_range is a permutation that depends on seed, epoch and stream") {
  auto a = shuffled_range(100, 1, 0, 0);
  auto sorted = a;
  std::sort(sorted.begin(), sorted.end());
  for (std::size_t i = 0; i < sorted.size(); ++i) CHECK(sorted[i] == i);
  CHECK(a == shuffled_range(100, 1, 0, 0));
  CHECK(a != shuffled_range(100, 2, 0, 0));
  CHECK(a != shuffled_range(100, 1, 1, 0));
  CHECK(a != shuffled_range(100, 1, 0, 1));
  CHECK(shuffled_range(0, 1, 0, 0).empty());
  CHECK(shuffled_range(1, 1, 0, 0) == std::vector<std::size_t>{0});
}
