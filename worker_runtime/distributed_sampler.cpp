#include "rankrun/distributed_sampler.hpp"

#include <numeric>
#include <stdexcept>
#include <string>

#include "rankrun/worker_context.hpp"
#include "worker_runtime/shuffle.hpp"

namespace rankrun {
namespace {

constexpr std::uint64_t k_sample_stream = 0;

void check_world(int world_size, int rank) {
  if (world_size < 1) throw std::invalid_argument("world_size=" + std::to_string(world_size) + " must be at least 1");
  if (rank < 0 || rank >= world_size)
    throw std::invalid_argument("rank=" + std::to_string(rank) + " must be in [0, " + std::to_string(world_size) + ")");
}

}  // namespace

DistributedSampler::DistributedSampler(std::size_t dataset_size, int world_size, int rank, SamplerOptions options)
    : m_dataset_size(dataset_size), m_world_size(world_size), m_rank(rank), m_options(options) {
  check_world(world_size, rank);
}

DistributedSampler::DistributedSampler(std::size_t dataset_size, const WorkerContext& context, SamplerOptions options)
    : DistributedSampler(dataset_size, context.world_size, context.rank, options) {}

std::size_t DistributedSampler::size() const {
  const auto world = static_cast<std::size_t>(m_world_size);
  return m_options.drop_last ? m_dataset_size / world : (m_dataset_size + world - 1) / world;
}

std::vector<std::size_t> DistributedSampler::indices() const {
  const auto world = static_cast<std::size_t>(m_world_size);
  const std::size_t per_rank = size();
  if (per_rank == 0) return {};

  std::vector<std::size_t> order;
  if (m_options.shuffle) {
    order = worker::shuffled_range(m_dataset_size, m_options.seed, m_epoch, k_sample_stream);
  } else {
    order.resize(m_dataset_size);
    std::iota(order.begin(), order.end(), std::size_t{0});
  }

  // Rank r reads positions r, r + world, ... of the padded (or truncated) order; position p
  // beyond N wraps to p mod N, which is torch's "repeat from the start" padding, including
  // the case N < world where the data is repeated more than once.
  std::vector<std::size_t> mine;
  mine.reserve(per_rank);
  for (std::size_t i = 0; i < per_rank; ++i) {
    std::size_t position = i * world + static_cast<std::size_t>(m_rank);
    mine.push_back(order[position % m_dataset_size]);
  }
  return mine;
}

std::vector<std::vector<std::size_t>> DistributedSampler::batches(std::size_t batch_size) const {
  if (batch_size == 0) throw std::invalid_argument("batch_size must be at least 1");
  std::vector<std::size_t> all = indices();
  std::vector<std::vector<std::size_t>> out;
  for (std::size_t begin = 0; begin < all.size(); begin += batch_size) {
    std::size_t end = std::min(all.size(), begin + batch_size);
    out.emplace_back(all.begin() + static_cast<std::ptrdiff_t>(begin), all.begin() + static_cast<std::ptrdiff_t>(end));
  }
  return out;
}

std::size_t DistributedSampler::num_batches(std::size_t batch_size) const {
  if (batch_size == 0) throw std::invalid_argument("batch_size must be at least 1");
  return (size() + batch_size - 1) / batch_size;
}

}  // namespace rankrun
