#pragma once
// The job as seen by one worker: its ranks, the world, and where the store is. Parsed from
// the environment rankrun (or torchrun) gives every worker.
// Public header: C++17.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "rankrun/worker_error.hpp"

namespace rankrun {

/// What the launcher told this worker. Outside a launcher (none of the rank variables set)
/// this is a world of one: rank 0 of 1, `launched == false`.
struct WorkerContext {
  int rank = 0;
  int local_rank = 0;
  int world_size = 1;
  int local_world_size = 1;
  /// `MASTER_ADDR` / `MASTER_PORT`: the store. Empty / 0 when not given (allowed only for a
  /// world of one, where no collective needs the store).
  std::string master_addr;
  std::uint16_t master_port = 0;
  /// `TORCHELASTIC_RESTART_COUNT`: how many times the launcher restarted the job (0 if unset).
  int restart_count = 0;
  /// `TORCHELASTIC_ERROR_FILE`: where to write the failure record; empty when unset.
  std::string error_file;
  /// `RANKRUN_HEARTBEAT_INTERVAL_MS`: how often rankrun needs a heartbeat to honour its
  /// --heartbeat-timeout; nullopt when unset.
  std::optional<int> heartbeat_interval_ms;
  /// `CUDA_VISIBLE_DEVICES` as given; nullopt when unset.
  std::optional<std::string> cuda_visible_devices;
  /// true when the rank variables were set (by rankrun, torchrun or another launcher).
  bool launched = false;

  bool has_store() const { return !master_addr.empty() && master_port != 0; }
};

using EnvMap = std::map<std::string, std::string>;

/// Either a context or the list of problems found (all of them, not just the first).
struct EnvParseResult {
  std::optional<WorkerContext> context;
  std::vector<std::string> errors;

  bool ok() const { return context.has_value(); }
  /// The errors joined into one message, one per line.
  std::string error_message() const;
};

/// Pure: validates `env` (no getenv). RANK, LOCAL_RANK, WORLD_SIZE and LOCAL_WORLD_SIZE must
/// be all set or all unset; numbers must be plain non-negative decimals; RANK < WORLD_SIZE,
/// LOCAL_RANK < LOCAL_WORLD_SIZE <= WORLD_SIZE; MASTER_ADDR and MASTER_PORT come together and
/// are required when WORLD_SIZE > 1.
EnvParseResult parse_worker_env(const EnvMap& env);

/// The variables `parse_worker_env` reads, taken from this process's environment.
EnvMap read_process_env();

/// `parse_worker_env(read_process_env())`, throwing `EnvError` with every problem.
WorkerContext load_worker_context();

/// Pure: the CUDA device this worker should use. rankrun pins one GPU per worker
/// (`CUDA_VISIBLE_DEVICES` holds one entry), so that is device 0; otherwise LOCAL_RANK, as
/// torchrun users expect. Throws `EnvError` when LOCAL_RANK names a device that
/// `CUDA_VISIBLE_DEVICES` does not list.
int select_cuda_device(const WorkerContext& context);

}  // namespace rankrun
