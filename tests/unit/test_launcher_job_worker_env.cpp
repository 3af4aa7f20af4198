#include <doctest/doctest.h>

#include "launcher/job/worker_env.hpp"

using namespace rankrun::launcher;

namespace {
AttemptSettings job() {
  AttemptSettings j;
  j.master_addr = "127.0.0.1";
  j.master_port = 40001;
  j.run_id = "none";
  j.role = "default";
  j.restart_count = 1;
  j.max_restarts = 3;
  j.use_agent_store = true;
  return j;
}
WorkerPlan plan() {
  WorkerPlan p;
  p.local_rank = 2;
  p.rank = 2;
  p.world_size = 4;
  p.local_world_size = 4;
  p.role_rank = 2;
  p.role_world_size = 4;
  p.cuda_visible_devices = "GPU-x";
  return p;
}
}  // namespace

TEST_CASE("every variable torchrun sets") {
  const EnvMap parent{{"PATH", "/bin"}, {"CUDA_VISIBLE_DEVICES", "0,1,2,3"}};
  const auto env = worker_env(parent, plan(), job(), "/tmp/e.json", true);
  const EnvMap expected{{"PATH", "/bin"},
                        {"CUDA_VISIBLE_DEVICES", "GPU-x"},
                        {"LOCAL_RANK", "2"},
                        {"RANK", "2"},
                        {"GROUP_RANK", "0"},
                        {"ROLE_RANK", "2"},
                        {"ROLE_NAME", "default"},
                        {"LOCAL_WORLD_SIZE", "4"},
                        {"WORLD_SIZE", "4"},
                        {"GROUP_WORLD_SIZE", "1"},
                        {"ROLE_WORLD_SIZE", "4"},
                        {"MASTER_ADDR", "127.0.0.1"},
                        {"MASTER_PORT", "40001"},
                        {"TORCHELASTIC_RESTART_COUNT", "1"},
                        {"TORCHELASTIC_MAX_RESTARTS", "3"},
                        {"TORCHELASTIC_RUN_ID", "none"},
                        {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                        {"TORCHELASTIC_ERROR_FILE", "/tmp/e.json"},
                        {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"},
                        {"OMP_NUM_THREADS", "1"},
                        {"RANKRUN_LOCAL_RANK", "2"}};
  CHECK(env == expected);
}

TEST_CASE("inherited values win where torchrun lets them") {
  const EnvMap parent{{"TORCH_NCCL_ASYNC_ERROR_HANDLING", "0"}, {"OMP_NUM_THREADS", "8"}};
  CHECK_FALSE(should_default_omp_threads(parent, 4));
  CHECK(should_default_omp_threads({}, 4));
  CHECK_FALSE(should_default_omp_threads({}, 1));
  const auto env = worker_env(parent, plan(), job(), "", false);
  CHECK(env.at("TORCH_NCCL_ASYNC_ERROR_HANDLING") == "0");
  CHECK(env.at("OMP_NUM_THREADS") == "8");
}

TEST_CASE("Python workers get the flight recorder unless the environment says otherwise") {
  auto j = job();
  j.python_hook_dir = "/run/rankrun/python";
  CHECK(worker_env({}, plan(), j, "", false).at("RANKRUN_FLIGHT_RECORDER") == "2000");
  CHECK(worker_env({{"RANKRUN_FLIGHT_RECORDER", "0"}}, plan(), j, "", false).at("RANKRUN_FLIGHT_RECORDER") == "0");
  // torch 2.2 and later warn about the old name: rankrun sets only the new one
  CHECK(worker_env({}, plan(), j, "", false).count("NCCL_ASYNC_ERROR_HANDLING") == 0);
}

TEST_CASE("--virtual-local-rank sets LOCAL_RANK=0 and keeps the true one aside") {
  auto j = job();
  j.virtual_local_rank = true;
  j.use_agent_store = false;
  const auto env = worker_env({}, plan(), j, "", false);
  CHECK(env.at("LOCAL_RANK") == "0");
  CHECK(env.at("RANKRUN_LOCAL_RANK") == "2");
  CHECK(env.at("TORCHELASTIC_USE_AGENT_STORE") == "False");
}

TEST_CASE("stack-dump hooks and --debug-hangs") {
  auto j = job();
  j.stack_dir = "/run/x/stacks";
  j.stack_signal = 42;
  j.python_hook_dir = "/run/x/python";
  j.debug_hangs = true;
  j.heartbeat_interval_ms = 750;
  auto env = worker_env({{"PYTHONPATH", "/mine"}, {"NCCL_DEBUG", "INFO"}}, plan(), j, "", false);
  CHECK(env.at("RANKRUN_STACK_DIR") == "/run/x/stacks");
  CHECK(env.at("RANKRUN_STACK_SIGNAL") == "42");
  CHECK(env.at("RANKRUN_HEARTBEAT_INTERVAL_MS") == "750");
  CHECK(env.at("PYTHONPATH") == "/run/x/python:/mine");
  CHECK(env.at("PYTHONFAULTHANDLER") == "1");
  CHECK(env.at("NCCL_DEBUG") == "INFO");  // the user's value wins
  CHECK(env.at("TORCH_DISTRIBUTED_DEBUG") == "DETAIL");
  CHECK(env.at("TORCH_CPP_LOG_LEVEL") == "INFO");
  // C++ frames would push torch's own error out of a failing rank's stderr tail.
  CHECK(env.count("TORCH_SHOW_CPP_STACKTRACES") == 0);
  env = worker_env({}, plan(), job(), "", false);
  CHECK(env.count("PYTHONPATH") == 0);
  CHECK(env.count("TORCH_DISTRIBUTED_DEBUG") == 0);
}
