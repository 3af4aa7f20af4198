#include "launcher/job/worker_env.hpp"

namespace rankrun::launcher {

bool should_default_omp_threads(const EnvMap& parent, int nproc) {
  return nproc > 1 && parent.find("OMP_NUM_THREADS") == parent.end();
}

EnvMap worker_env(const EnvMap& parent, const WorkerPlan& p, const AttemptSettings& attempt,
                  const std::string& error_file, bool default_omp_threads) {
  EnvMap env = parent;
  const auto set = [&env](const char* key, const std::string& value) { env[key] = value; };
  set("LOCAL_RANK", std::to_string(attempt.virtual_local_rank ? 0 : p.local_rank));
  set("RANK", std::to_string(p.rank));
  set("GROUP_RANK", std::to_string(p.group_rank));
  set("ROLE_RANK", std::to_string(p.role_rank));
  set("ROLE_NAME", attempt.role);
  set("LOCAL_WORLD_SIZE", std::to_string(p.local_world_size));
  set("WORLD_SIZE", std::to_string(p.world_size));
  set("GROUP_WORLD_SIZE", std::to_string(p.group_world_size));
  set("ROLE_WORLD_SIZE", std::to_string(p.role_world_size));
  set("MASTER_ADDR", attempt.master_addr);
  set("MASTER_PORT", std::to_string(attempt.master_port));
  set("TORCHELASTIC_RESTART_COUNT", std::to_string(attempt.restart_count));
  set("TORCHELASTIC_MAX_RESTARTS", std::to_string(attempt.max_restarts));
  set("TORCHELASTIC_RUN_ID", attempt.run_id);
  // Python's str(bool): exactly "True" or "False"; torch compares the string.
  set("TORCHELASTIC_USE_AGENT_STORE", attempt.use_agent_store ? "True" : "False");
  set("TORCHELASTIC_ERROR_FILE", error_file);
  if (!attempt.signals_to_handle.empty()) set("TORCHELASTIC_SIGNALS_TO_HANDLE", attempt.signals_to_handle);
  // Inherited value wins. torch 2.2 and later read this name and warn about the old one,
  // NCCL_ASYNC_ERROR_HANDLING, which rankrun's sitecustomize.py sets for an older torch only.
  if (env.find("TORCH_NCCL_ASYNC_ERROR_HANDLING") == env.end()) set("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1");
  if (default_omp_threads) set("OMP_NUM_THREADS", "1");
  if (p.cuda_visible_devices) set("CUDA_VISIBLE_DEVICES", *p.cuda_visible_devices);
  const auto set_default = [&env](const char* key, const char* value) { env.emplace(key, value); };
  if (!attempt.stack_dir.empty()) {
    set("RANKRUN_STACK_DIR", attempt.stack_dir);
    set("RANKRUN_STACK_SIGNAL", std::to_string(attempt.stack_signal));
  }
  if (attempt.heartbeat_interval_ms > 0)
    set("RANKRUN_HEARTBEAT_INTERVAL_MS", std::to_string(attempt.heartbeat_interval_ms));
  if (!attempt.python_hook_dir.empty()) {
    const auto it = env.find("PYTHONPATH");
    set("PYTHONPATH",
        it == env.end() || it->second.empty() ? attempt.python_hook_dir : attempt.python_hook_dir + ":" + it->second);
    if (!attempt.worker_library.empty()) set("RANKRUN_WORKER_LIBRARY", attempt.worker_library);
    // Python prints its stack on a fatal signal (SIGSEGV, SIGABRT) too.
    set_default("PYTHONFAULTHANDLER", "1");
    // torch's flight recorder, with this many entries per recorder, under the name the worker's
    // torch reads (sitecustomize.py; a TORCH_FR_BUFFER_SIZE of the user's wins).
    set_default("RANKRUN_FLIGHT_RECORDER", k_flight_recorder_entries);
  }
  if (attempt.debug_hangs) {
    // Not TORCH_SHOW_CPP_STACKTRACES: its C++ frames would be a failing rank's last stderr
    // lines, and the report's stderr tail would lose torch's own message ("Detected mismatch
    // between collectives ...").
    set_default("NCCL_DEBUG", "WARN");
    set_default("TORCH_DISTRIBUTED_DEBUG", "DETAIL");
    set_default("TORCH_CPP_LOG_LEVEL", "INFO");
  }
  // rankrun's own: which local rank this really is, even under --virtual-local-rank.
  set("RANKRUN_LOCAL_RANK", std::to_string(p.local_rank));
  return env;
}

}  // namespace rankrun::launcher
