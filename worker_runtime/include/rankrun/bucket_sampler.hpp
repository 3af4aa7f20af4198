#pragma once
// Length-bucketed batches for data of very uneven sample lengths, sharded so that every rank
// gets exactly the same number of batches. A bucketing sampler that shards samples first and
// batches them per rank afterwards gives ranks different batch counts, and the job hangs at
// the end of the epoch; this one plans the whole epoch's batches identically on every rank
// and deals them out in rounds of `world_size` batches from the same bucket.
// Public header: C++17.

#include <cstddef>
#include <cstdint>
#include <vector>

namespace rankrun {

struct WorkerContext;

struct BucketSamplerOptions {
  /// Permute samples within buckets and the order of rounds each epoch.
  bool shuffle = true;
  /// Must be the same on every rank.
  std::uint64_t seed = 0;
  /// false: a bucket's last short batch is kept, and a bucket whose batch count does not
  /// divide by the world size repeats its first batches to fill the last round (samples are
  /// read twice, as with DistributedSampler's padding). true: short batches and the bucket's
  /// incomplete last round are dropped, so no sample is read twice.
  bool drop_last = false;
};

/// Pure: every rank builds one with the same arguments except `rank`.
/// Bucket i holds the samples with `boundaries[i-1] <= length < boundaries[i]`; the last
/// bucket (index boundaries.size()) holds lengths >= boundaries.back(). Bucket i's batches
/// have at most `batch_sizes[i]` samples. At step k every rank reads a batch of the same
/// bucket, so ranks do similar work per step.
class BucketSampler {
 public:
  /// Throws std::invalid_argument when `boundaries` is not strictly increasing,
  /// `batch_sizes.size() != boundaries.size() + 1`, a batch size is 0, or the world/rank is
  /// invalid.
  BucketSampler(std::vector<std::size_t> lengths, std::vector<std::size_t> boundaries,
                std::vector<std::size_t> batch_sizes, int world_size, int rank, BucketSamplerOptions options = {});
  BucketSampler(std::vector<std::size_t> lengths, std::vector<std::size_t> boundaries,
                std::vector<std::size_t> batch_sizes, const WorkerContext& context, BucketSamplerOptions options = {});

  /// Same value on every rank, at the start of every epoch.
  void set_epoch(std::uint64_t epoch) { m_epoch = epoch; }
  std::uint64_t epoch() const { return m_epoch; }

  /// This rank's batches for the current epoch, in reading order.
  std::vector<std::vector<std::size_t>> batches() const;
  /// Number of batches per rank; the same on every rank and in every epoch.
  std::size_t num_batches() const;
  /// Which bucket a sample of `length` falls into.
  std::size_t bucket_of(std::size_t length) const;
  std::size_t num_buckets() const { return m_batch_sizes.size(); }

 private:
  std::vector<std::size_t> bucket_counts() const;

  std::vector<std::size_t> m_lengths;
  std::vector<std::size_t> m_boundaries;
  std::vector<std::size_t> m_batch_sizes;
  int m_world_size;
  int m_rank;
  BucketSamplerOptions m_options;
  std::uint64_t m_epoch = 0;
};

}  // namespace rankrun
