// The C API's progress and plans (worker.h), for FFI users such as rankrun.progress and
// rankrun.data: thin wrappers over Heartbeat and the samplers; no exception crosses into C.
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "rankrun/bucket_sampler.hpp"
#include "rankrun/distributed_sampler.hpp"
#include "rankrun/heartbeat.hpp"
#include "rankrun/worker.h"
#include "worker_runtime/c_error.hpp"
#include "rankrun/worker_context.hpp"
#include "rankrun/worker_error.hpp"

struct rankrun_progress {
  std::unique_ptr<rankrun::Heartbeat> heartbeat;
};

struct rankrun_plan {
  std::vector<std::uint64_t> indices;
  std::vector<std::uint64_t> offsets;
};

namespace {

static_assert(std::is_same_v<std::size_t, std::uint64_t>, "plans hand out size_t indices as uint64_t");

using rankrun::worker::copy_error;

template <typename Fn>
int guarded(char* err, size_t err_size, Fn&& fn) {
  try {
    return fn();
  } catch (const rankrun::EnvError& e) {
    copy_error(e.what(), err, err_size);
    return RANKRUN_ERR_ENV;
  } catch (const std::invalid_argument& e) {
    copy_error(e.what(), err, err_size);
    return RANKRUN_ERR_INVALID;
  } catch (const std::exception& e) {
    copy_error(e.what(), err, err_size);
    return RANKRUN_ERR_INTERNAL;
  } catch (...) {
    copy_error("unknown error", err, err_size);
    return RANKRUN_ERR_INTERNAL;
  }
}

std::vector<std::size_t> copied(const uint64_t* values, uint64_t count, const char* what) {
  if (count && !values) throw std::invalid_argument(std::string(what) + " is NULL");
  return std::vector<std::size_t>(values, values + count);
}

}  // namespace

extern "C" {

int rankrun_progress_create(rankrun_progress** out, int64_t interval_ms, char* err, size_t err_size) {
  if (!out) return RANKRUN_ERR_INVALID;
  *out = nullptr;
  return guarded(err, err_size, [&] {
    const rankrun::WorkerContext context = rankrun::load_worker_context();
    if (!context.has_store()) return RANKRUN_OK;
    rankrun::HeartbeatOptions options;
    options.on_calls_only = true;
    if (interval_ms > 0) options.interval = std::chrono::milliseconds(interval_ms);
    auto progress = std::make_unique<rankrun_progress>();
    progress->heartbeat = std::make_unique<rankrun::Heartbeat>(context, options);
    *out = progress.release();
    return RANKRUN_OK;
  });
}

void rankrun_progress_destroy(rankrun_progress* progress) { delete progress; }

void rankrun_progress_step(rankrun_progress* progress, int64_t step) {
  if (progress) progress->heartbeat->step(step);
}

void rankrun_progress_beat(rankrun_progress* progress) {
  if (progress) progress->heartbeat->beat();
}

void rankrun_progress_enter_section(rankrun_progress* progress, const char* name, int64_t timeout_ms) {
  if (progress) progress->heartbeat->enter_section(name ? name : "", std::chrono::milliseconds(timeout_ms));
}

void rankrun_progress_leave_section(rankrun_progress* progress) {
  if (progress) progress->heartbeat->leave_section();
}

void rankrun_progress_batches(rankrun_progress* progress, uint64_t epoch, uint64_t read, uint64_t planned) {
  if (progress) progress->heartbeat->batches(epoch, read, planned);
}

uint64_t rankrun_progress_beats(const rankrun_progress* progress) {
  return progress ? progress->heartbeat->beats() : 0;
}

int rankrun_plan_distributed(rankrun_plan** out, uint64_t dataset_size, int world_size, int rank, int shuffle,
                             uint64_t seed, uint64_t epoch, int drop_last, char* err, size_t err_size) {
  if (!out) return RANKRUN_ERR_INVALID;
  *out = nullptr;
  return guarded(err, err_size, [&] {
    rankrun::SamplerOptions options;
    options.shuffle = shuffle != 0;
    options.seed = seed;
    options.drop_last = drop_last != 0;
    rankrun::DistributedSampler sampler(dataset_size, world_size, rank, options);
    sampler.set_epoch(epoch);
    auto plan = std::make_unique<rankrun_plan>();
    plan->indices = sampler.indices();
    plan->offsets = {0, plan->indices.size()};
    *out = plan.release();
    return RANKRUN_OK;
  });
}

int rankrun_plan_buckets(rankrun_plan** out, const uint64_t* lengths, uint64_t num_samples, const uint64_t* boundaries,
                         uint64_t num_boundaries, const uint64_t* batch_sizes, int world_size, int rank, int shuffle,
                         uint64_t seed, uint64_t epoch, int drop_last, char* err, size_t err_size) {
  if (!out) return RANKRUN_ERR_INVALID;
  *out = nullptr;
  return guarded(err, err_size, [&] {
    rankrun::BucketSamplerOptions options;
    options.shuffle = shuffle != 0;
    options.seed = seed;
    options.drop_last = drop_last != 0;
    rankrun::BucketSampler sampler(copied(lengths, num_samples, "lengths"),
                                   copied(boundaries, num_boundaries, "boundaries"),
                                   copied(batch_sizes, num_boundaries + 1, "batch_sizes"), world_size, rank, options);
    sampler.set_epoch(epoch);
    auto plan = std::make_unique<rankrun_plan>();
    const auto batches = sampler.batches();
    plan->offsets.reserve(batches.size() + 1);
    plan->offsets.push_back(0);
    for (const auto& batch : batches) {
      plan->indices.insert(plan->indices.end(), batch.begin(), batch.end());
      plan->offsets.push_back(plan->indices.size());
    }
    *out = plan.release();
    return RANKRUN_OK;
  });
}

uint64_t rankrun_plan_size(const rankrun_plan* plan) { return plan ? plan->indices.size() : 0; }
const uint64_t* rankrun_plan_indices(const rankrun_plan* plan) { return plan ? plan->indices.data() : nullptr; }
uint64_t rankrun_plan_batches(const rankrun_plan* plan) {
  return plan && !plan->offsets.empty() ? plan->offsets.size() - 1 : 0;
}
const uint64_t* rankrun_plan_offsets(const rankrun_plan* plan) { return plan ? plan->offsets.data() : nullptr; }
void rankrun_plan_destroy(rankrun_plan* plan) { delete plan; }

}  // extern "C"
