#include <doctest/doctest.h>

#include <map>
#include <set>
#include <stdexcept>
#include <vector>

#include "rankrun/bucket_sampler.hpp"

using rankrun::BucketSampler;
using rankrun::BucketSamplerOptions;
using Batches = std::vector<std::vector<std::size_t>>;

namespace {

const std::size_t k_sizes[] = {0, 1, 2, 7, 13, 64, 1000, 1001};
const std::vector<std::size_t> k_boundaries{100, 220};
const std::vector<std::size_t> k_batch_sizes{8, 5, 3};

// Deterministic, very uneven lengths: most short, some medium, few long (seed 004's data).
std::vector<std::size_t> lengths_for(std::size_t n) {
  std::vector<std::size_t> lengths;
  for (std::size_t i = 0; i < n; ++i) lengths.push_back((i * 7919) % 97 < 70 ? i % 100 : (i % 3 ? 150 : 400));
  return lengths;
}

std::vector<Batches> per_rank(std::size_t n, int world, BucketSamplerOptions options, std::uint64_t epoch) {
  std::vector<Batches> out;
  for (int rank = 0; rank < world; ++rank) {
    BucketSampler sampler(lengths_for(n), k_boundaries, k_batch_sizes, world, rank, options);
    sampler.set_epoch(epoch);
    out.push_back(sampler.batches());
  }
  return out;
}

}  // namespace

TEST_CASE("every rank gets the same number of batches") {
  for (int world = 1; world <= 8; ++world)
    for (std::size_t n : k_sizes)
      for (bool drop_last : {false, true})
        for (std::uint64_t epoch : {0, 1, 2}) {
          CAPTURE(world);
          CAPTURE(n);
          CAPTURE(drop_last);
          CAPTURE(epoch);
          BucketSamplerOptions options;
          options.drop_last = drop_last;
          options.seed = 11;
          const auto all = per_rank(n, world, options, epoch);
          const std::size_t expected =
              BucketSampler(lengths_for(n), k_boundaries, k_batch_sizes, world, 0, options).num_batches();
          for (const auto& batches : all) CHECK(batches.size() == expected);
        }
}

TEST_CASE("batches respect their bucket, and every step reads one bucket on all ranks") {
  for (int world = 1; world <= 8; ++world)
    for (std::size_t n : k_sizes) {
      CAPTURE(world);
      CAPTURE(n);
      const auto lengths = lengths_for(n);
      BucketSampler probe(lengths, k_boundaries, k_batch_sizes, world, 0);
      const auto all = per_rank(n, world, {}, 4);
      for (std::size_t step = 0; step < all[0].size(); ++step) {
        std::set<std::size_t> step_buckets;
        for (const auto& batches : all) {
          const auto& batch = batches[step];
          REQUIRE(!batch.empty());
          const std::size_t bucket = probe.bucket_of(lengths[batch.front()]);
          for (std::size_t index : batch) CHECK(probe.bucket_of(lengths[index]) == bucket);
          CHECK(batch.size() <= k_batch_sizes[bucket]);
          step_buckets.insert(bucket);
        }
        CHECK(step_buckets.size() == 1);
      }
    }
}

TEST_CASE("padded: every sample is read; drop_last: no sample is read twice") {
  for (int world = 1; world <= 8; ++world)
    for (std::size_t n : k_sizes) {
      CAPTURE(world);
      CAPTURE(n);
      std::map<std::size_t, int> padded;
      for (const auto& batches : per_rank(n, world, {}, 2))
        for (const auto& batch : batches)
          for (std::size_t index : batch) ++padded[index];
      CHECK(padded.size() == n);
      for (const auto& [index, times] : padded) CHECK(index < n);

      BucketSamplerOptions drop;
      drop.drop_last = true;
      std::map<std::size_t, int> dropped;
      for (const auto& batches : per_rank(n, world, drop, 2))
        for (const auto& batch : batches) {
          for (std::size_t index : batch) ++dropped[index];
        }
      for (const auto& [index, times] : dropped) CHECK(times == 1);
    }
}

TEST_CASE("drop_last keeps only full batches") {
  BucketSamplerOptions drop;
  drop.drop_last = true;
  const auto lengths = lengths_for(1001);
  for (int world = 1; world <= 8; ++world) {
    BucketSampler sampler(lengths, k_boundaries, k_batch_sizes, world, world - 1, drop);
    for (const auto& batch : sampler.batches())
      CHECK(batch.size() == k_batch_sizes[sampler.bucket_of(lengths[batch[0]])]);
  }
}

TEST_CASE("the order changes with the epoch and is reproducible") {
  for (int world = 1; world <= 8; ++world) {
    CAPTURE(world);
    CHECK(per_rank(1000, world, {}, 0) != per_rank(1000, world, {}, 1));
    CHECK(per_rank(1001, world, {}, 3) == per_rank(1001, world, {}, 3));
  }
}

TEST_CASE("the batch count does not depend on the epoch") {
  BucketSampler sampler(lengths_for(1001), k_boundaries, k_batch_sizes, 3, 1);
  const std::size_t count = sampler.num_batches();
  for (std::uint64_t epoch = 0; epoch < 5; ++epoch) {
    sampler.set_epoch(epoch);
    CHECK(sampler.batches().size() == count);
  }
}

TEST_CASE("bucket_of follows the boundaries") {
  BucketSampler sampler({}, {10, 20}, {1, 1, 1}, 1, 0);
  CHECK(sampler.num_buckets() == 3);
  CHECK(sampler.bucket_of(0) == 0);
  CHECK(sampler.bucket_of(9) == 0);
  CHECK(sampler.bucket_of(10) == 1);
  CHECK(sampler.bucket_of(19) == 1);
  CHECK(sampler.bucket_of(20) == 2);
  CHECK(sampler.bucket_of(100000) == 2);
}

TEST_CASE("constructor errors name the value") {
  CHECK_THROWS_WITH_AS(BucketSampler({}, {20, 10}, {1, 1, 1}, 1, 0), doctest::Contains("strictly increasing"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(BucketSampler({}, {10}, {1, 1, 1}, 1, 0), doctest::Contains("3 batch sizes"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(BucketSampler({}, {10}, {1, 0}, 1, 0), doctest::Contains("batch_sizes[1] is 0"),
                       std::invalid_argument);
  CHECK_THROWS_AS(BucketSampler({}, {}, {1}, 2, 2), std::invalid_argument);
}
