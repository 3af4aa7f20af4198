#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <stdexcept>
#include <vector>

#include "rankrun/distributed_sampler.hpp"
#include "rankrun/worker_context.hpp"

using rankrun::DistributedSampler;
using rankrun::SamplerOptions;

namespace {

const std::size_t k_sizes[] = {0, 1, 2, 7, 13, 64, 1000, 1001};

std::vector<std::vector<std::size_t>> shards(std::size_t n, int world, SamplerOptions options, std::uint64_t epoch) {
  std::vector<std::vector<std::size_t>> out;
  for (int rank = 0; rank < world; ++rank) {
    DistributedSampler sampler(n, world, rank, options);
    sampler.set_epoch(epoch);
    out.push_back(sampler.indices());
  }
  return out;
}

std::map<std::size_t, int> counts(const std::vector<std::vector<std::size_t>>& all) {
  std::map<std::size_t, int> out;
  for (const auto& shard : all)
    for (std::size_t i : shard) ++out[i];
  return out;
}

}  // namespace

TEST_CASE("padded shards: equal sizes, cover the data, only padding repeats") {
  for (int world = 1; world <= 8; ++world)
    for (std::size_t n : k_sizes)
      for (bool shuffle : {true, false}) {
        CAPTURE(world);
        CAPTURE(n);
        CAPTURE(shuffle);
        SamplerOptions options;
        options.shuffle = shuffle;
        options.seed = 7;
        const auto all = shards(n, world, options, 3);
        const std::size_t per_rank = (n + static_cast<std::size_t>(world) - 1) / static_cast<std::size_t>(world);
        for (const auto& shard : all) CHECK(shard.size() == per_rank);
        const auto seen = counts(all);
        CHECK(seen.size() == n);  // every index appears ...
        for (const auto& [index, times] : seen) CHECK(index < n);
        // ... and the extra reads are exactly the padding.
        std::size_t reads = 0;
        for (const auto& [index, times] : seen) reads += static_cast<std::size_t>(times);
        CHECK(reads == per_rank * static_cast<std::size_t>(world));
        if (n >= static_cast<std::size_t>(world))
          for (const auto& [index, times] : seen) CHECK(times <= 2);
      }
}

TEST_CASE("drop_last shards: equal sizes, disjoint, drop fewer than world samples") {
  for (int world = 1; world <= 8; ++world)
    for (std::size_t n : k_sizes) {
      CAPTURE(world);
      CAPTURE(n);
      SamplerOptions options;
      options.drop_last = true;
      const auto all = shards(n, world, options, 1);
      const std::size_t per_rank = n / static_cast<std::size_t>(world);
      for (const auto& shard : all) CHECK(shard.size() == per_rank);
      const auto seen = counts(all);
      for (const auto& [index, times] : seen) CHECK(times == 1);
      CHECK(n - seen.size() < static_cast<std::size_t>(world));
    }
}

TEST_CASE("batch counts are equal across ranks for every batch size") {
  for (int world = 1; world <= 8; ++world)
    for (std::size_t n : k_sizes)
      for (bool drop_last : {false, true})
        for (std::size_t batch = 1; batch <= 6; ++batch) {
          CAPTURE(world);
          CAPTURE(n);
          CAPTURE(batch);
          SamplerOptions options;
          options.drop_last = drop_last;
          std::set<std::size_t> batch_counts;
          for (int rank = 0; rank < world; ++rank) {
            DistributedSampler sampler(n, world, rank, options);
            auto batches = sampler.batches(batch);
            CHECK(batches.size() == sampler.num_batches(batch));
            batch_counts.insert(batches.size());
            std::size_t total = 0;
            for (const auto& b : batches) {
              CHECK(!b.empty());
              CHECK(b.size() <= batch);
              total += b.size();
            }
            CHECK(total == sampler.size());
          }
          CHECK(batch_counts.size() == 1);
        }
}

TEST_CASE("the order changes with the epoch and is reproducible") {
  for (int world = 1; world <= 8; ++world)
    for (std::size_t n : {std::size_t{13}, std::size_t{1000}, std::size_t{1001}}) {
      CAPTURE(world);
      CAPTURE(n);
      SamplerOptions options;
      options.seed = 42;
      CHECK(shards(n, world, options, 0) != shards(n, world, options, 1));
      CHECK(shards(n, world, options, 5) == shards(n, world, options, 5));
      options.seed = 43;
      auto other_seed = shards(n, world, options, 5);
      options.seed = 42;
      CHECK(other_seed != shards(n, world, options, 5));
    }
}

TEST_CASE("without shuffle rank r reads r, r+world, ... as torch does") {
  SamplerOptions options;
  options.shuffle = false;
  DistributedSampler sampler(10, 4, 1, options);
  CHECK(sampler.indices() == std::vector<std::size_t>{1, 5, 9});
  DistributedSampler last(10, 4, 3, options);
  CHECK(last.indices() == std::vector<std::size_t>{3, 7, 1});  // padded from the start
  DistributedSampler tiny(1, 3, 2, options);
  CHECK(tiny.indices() == std::vector<std::size_t>{0});
}

TEST_CASE("the shuffle is pinned: ranks built by any compiler agree") {
  // If this changes, ranks running different builds would read different data.
  SamplerOptions options;
  options.seed = 0;
  DistributedSampler sampler(10, 1, 0, options);
  sampler.set_epoch(0);
  const auto order = sampler.indices();
  std::vector<std::size_t> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  std::vector<std::size_t> expected_sorted(10);
  std::iota(expected_sorted.begin(), expected_sorted.end(), std::size_t{0});
  CHECK(sorted == expected_sorted);
  CHECK(order == std::vector<std::size_t>{5, 2, 3, 9, 0, 8, 7, 4, 1, 6});
}

TEST_CASE("constructor errors name the value") {
  CHECK_THROWS_WITH_AS(DistributedSampler(10, 0, 0), doctest::Contains("world_size=0"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(DistributedSampler(10, 4, 4), doctest::Contains("rank=4"), std::invalid_argument);
  CHECK_THROWS_AS(DistributedSampler(10, 4, -1), std::invalid_argument);
  CHECK_THROWS_AS(DistributedSampler(10, 1, 0).batches(0), std::invalid_argument);
}

TEST_CASE("built from a WorkerContext") {
  rankrun::WorkerContext context;
  context.rank = 2;
  context.world_size = 3;
  DistributedSampler sampler(9, context, {false, 0, false});
  CHECK(sampler.indices() == std::vector<std::size_t>{2, 5, 8});
}
