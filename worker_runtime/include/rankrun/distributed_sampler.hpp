#pragma once
// Which samples each rank reads in an epoch: torch's DistributedSampler, computed the same
// way on every rank so that every rank gets the same number of samples (and therefore of
// batches) and no rank waits at the end of an epoch for a batch that never comes.
// Public header: C++17.

#include <cstddef>
#include <cstdint>
#include <vector>

namespace rankrun {

struct WorkerContext;

struct SamplerOptions {
  /// Permute the data each epoch (by `seed` and the epoch); false keeps 0..N-1 order.
  bool shuffle = true;
  /// Must be the same on every rank.
  std::uint64_t seed = 0;
  /// false: pad by repeating samples from the start of the (shuffled) order until N divides
  /// evenly, as torch does. true: drop the tail instead, so no sample is read twice.
  bool drop_last = false;
};

/// Shard of `dataset_size` indices for one rank. Pure: no communication; every rank builds
/// its own with the same arguments except `rank`.
class DistributedSampler {
 public:
  /// Throws std::invalid_argument when `world_size` < 1 or `rank` is outside [0, world_size).
  DistributedSampler(std::size_t dataset_size, int world_size, int rank, SamplerOptions options = {});
  DistributedSampler(std::size_t dataset_size, const WorkerContext& context, SamplerOptions options = {});

  /// Call at the start of every epoch (with the same value on every rank) so the order changes.
  void set_epoch(std::uint64_t epoch) { m_epoch = epoch; }
  std::uint64_t epoch() const { return m_epoch; }

  /// Samples per rank: ceil(N / world) when padding, floor(N / world) with drop_last.
  std::size_t size() const;
  /// This rank's sample indices for the current epoch, in reading order.
  std::vector<std::size_t> indices() const;
  /// `indices()` cut into batches of `batch_size` (> 0); the last one may be short, and is the
  /// same length on every rank. Throws std::invalid_argument for `batch_size` 0.
  std::vector<std::vector<std::size_t>> batches(std::size_t batch_size) const;
  /// Number of batches `batches(batch_size)` returns; equal on every rank.
  std::size_t num_batches(std::size_t batch_size) const;

 private:
  std::size_t m_dataset_size;
  int m_world_size;
  int m_rank;
  SamplerOptions m_options;
  std::uint64_t m_epoch = 0;
};

}  // namespace rankrun
