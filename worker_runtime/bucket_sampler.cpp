#include "rankrun/bucket_sampler.hpp"

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <string>

#include "rankrun/worker_context.hpp"
#include "worker_runtime/shuffle.hpp"

namespace rankrun {
namespace {

constexpr std::uint64_t k_sample_stream = 0;
constexpr std::uint64_t k_round_stream = 1;

using Batch = std::vector<std::size_t>;

// Batches of one bucket in rounds of `world` after dropping or padding; see the header.
std::size_t batches_in_bucket(std::size_t count, std::size_t batch_size, bool drop_last) {
  return drop_last ? count / batch_size : (count + batch_size - 1) / batch_size;
}

std::size_t rounds_in_bucket(std::size_t batches, std::size_t world, bool drop_last) {
  return drop_last ? batches / world : (batches + world - 1) / world;
}

}  // namespace

BucketSampler::BucketSampler(std::vector<std::size_t> lengths, std::vector<std::size_t> boundaries,
                             std::vector<std::size_t> batch_sizes, int world_size, int rank,
                             BucketSamplerOptions options)
    : m_lengths(std::move(lengths)),
      m_boundaries(std::move(boundaries)),
      m_batch_sizes(std::move(batch_sizes)),
      m_world_size(world_size),
      m_rank(rank),
      m_options(options) {
  if (world_size < 1) throw std::invalid_argument("world_size=" + std::to_string(world_size) + " must be at least 1");
  if (rank < 0 || rank >= world_size)
    throw std::invalid_argument("rank=" + std::to_string(rank) + " must be in [0, " + std::to_string(world_size) + ")");
  for (std::size_t i = 1; i < m_boundaries.size(); ++i)
    if (m_boundaries[i] <= m_boundaries[i - 1])
      throw std::invalid_argument("bucket boundaries must be strictly increasing, but boundaries[" + std::to_string(i) +
                                  "]=" + std::to_string(m_boundaries[i]) + " <= boundaries[" + std::to_string(i - 1) +
                                  "]=" + std::to_string(m_boundaries[i - 1]));
  if (m_batch_sizes.size() != m_boundaries.size() + 1)
    throw std::invalid_argument(std::to_string(m_boundaries.size()) + " boundaries make " +
                                std::to_string(m_boundaries.size() + 1) + " buckets, but " +
                                std::to_string(m_batch_sizes.size()) + " batch sizes were given");
  for (std::size_t i = 0; i < m_batch_sizes.size(); ++i)
    if (m_batch_sizes[i] == 0) throw std::invalid_argument("batch_sizes[" + std::to_string(i) + "] is 0");
}

BucketSampler::BucketSampler(std::vector<std::size_t> lengths, std::vector<std::size_t> boundaries,
                             std::vector<std::size_t> batch_sizes, const WorkerContext& context,
                             BucketSamplerOptions options)
    : BucketSampler(std::move(lengths), std::move(boundaries), std::move(batch_sizes), context.world_size, context.rank,
                    options) {}

std::size_t BucketSampler::bucket_of(std::size_t length) const {
  return static_cast<std::size_t>(std::upper_bound(m_boundaries.begin(), m_boundaries.end(), length) -
                                  m_boundaries.begin());
}

std::vector<std::size_t> BucketSampler::bucket_counts() const {
  std::vector<std::size_t> counts(num_buckets(), 0);
  for (std::size_t length : m_lengths) ++counts[bucket_of(length)];
  return counts;
}

std::size_t BucketSampler::num_batches() const {
  const auto world = static_cast<std::size_t>(m_world_size);
  std::vector<std::size_t> counts = bucket_counts();
  std::size_t total = 0;
  for (std::size_t b = 0; b < counts.size(); ++b)
    total += rounds_in_bucket(batches_in_bucket(counts[b], m_batch_sizes[b], m_options.drop_last), world,
                              m_options.drop_last);
  return total;
}

std::vector<std::vector<std::size_t>> BucketSampler::batches() const {
  const auto world = static_cast<std::size_t>(m_world_size);
  const auto rank = static_cast<std::size_t>(m_rank);

  std::vector<std::size_t> order;
  if (m_options.shuffle) {
    order = worker::shuffled_range(m_lengths.size(), m_options.seed, m_epoch, k_sample_stream);
  } else {
    order.resize(m_lengths.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
  }
  std::vector<std::vector<std::size_t>> buckets(num_buckets());
  for (std::size_t index : order) buckets[bucket_of(m_lengths[index])].push_back(index);

  // Every rank builds the same list of rounds; a round is `world` batches of one bucket and
  // rank r takes the r-th. That is what makes the batch count equal on every rank.
  std::vector<std::vector<Batch>> rounds;
  for (std::size_t b = 0; b < buckets.size(); ++b) {
    const std::vector<std::size_t>& samples = buckets[b];
    const std::size_t batch_size = m_batch_sizes[b];
    const std::size_t n_batches = batches_in_bucket(samples.size(), batch_size, m_options.drop_last);
    std::vector<Batch> bucket_batches;
    for (std::size_t i = 0; i < n_batches; ++i) {
      auto begin = samples.begin() + static_cast<std::ptrdiff_t>(i * batch_size);
      auto end = samples.begin() + static_cast<std::ptrdiff_t>(std::min(samples.size(), (i + 1) * batch_size));
      bucket_batches.emplace_back(begin, end);
    }
    const std::size_t n_rounds = rounds_in_bucket(n_batches, world, m_options.drop_last);
    for (std::size_t r = 0; r < n_rounds; ++r) {
      std::vector<Batch> round;
      for (std::size_t k = 0; k < world; ++k) round.push_back(bucket_batches[(r * world + k) % n_batches]);
      rounds.push_back(std::move(round));
    }
  }

  std::vector<std::size_t> round_order(rounds.size());
  std::iota(round_order.begin(), round_order.end(), std::size_t{0});
  if (m_options.shuffle) round_order = worker::shuffled_range(rounds.size(), m_options.seed, m_epoch, k_round_stream);

  std::vector<Batch> mine;
  mine.reserve(rounds.size());
  for (std::size_t r : round_order) mine.push_back(std::move(rounds[r][rank]));
  return mine;
}

}  // namespace rankrun
