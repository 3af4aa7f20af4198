#pragma once
// The environment of each worker, exactly as torchrun sets it, plus rankrun's pinning. Pure.

#include <cstdint>
#include <string>

#include "launcher/config/options.hpp"
#include "launcher/job/rank_plan.hpp"

namespace rankrun::launcher {

/// The settings every worker of one attempt shares (store address, attempt number, hooks).
struct AttemptSettings {
  std::string master_addr;
  std::uint16_t master_port = 0;
  std::string run_id;
  std::string role;
  int restart_count = 0;
  int max_restarts = 0;
  bool use_agent_store = false;
  bool virtual_local_rank = false;
  /// Where workers write their stacks when asked (RANKRUN_STACK_DIR), and the signal that asks.
  std::string stack_dir;
  int stack_signal = 0;
  /// rankrun's sitecustomize.py, put first on PYTHONPATH (registers the stack-dump signal).
  std::string python_hook_dir;
  /// This rankrun's librankrun_worker, for rankrun.data and rankrun.progress (RANKRUN_WORKER_LIBRARY).
  std::string worker_library;
  /// How often the worker runtime should heartbeat (RANKRUN_HEARTBEAT_INTERVAL_MS; 0: its default).
  int heartbeat_interval_ms = 0;
  /// --debug-hangs: verbose NCCL and torch.distributed defaults.
  bool debug_hangs = false;
  /// --signals-to-handle as given (TORCHELASTIC_SIGNALS_TO_HANDLE, as torchrun exports it); "" none.
  std::string signals_to_handle;
};

/// Entries of torch's flight recorder in each Python worker (RANKRUN_FLIGHT_RECORDER, unless the
/// environment sets it; 0: off): per recorder, a ring of the latest collectives, a few hundred
/// bytes each.
inline constexpr const char* k_flight_recorder_entries = "2000";

/// True when torchrun's rule applies: OMP_NUM_THREADS unset and more than one worker per node.
bool should_default_omp_threads(const EnvMap& parent, int nproc);

/// `parent` (the launcher's environment) updated with the worker's variables. `error_file` is
/// the worker's TORCHELASTIC_ERROR_FILE.
EnvMap worker_env(const EnvMap& parent, const WorkerPlan& plan, const AttemptSettings& attempt,
                  const std::string& error_file, bool default_omp_threads);

}  // namespace rankrun::launcher
