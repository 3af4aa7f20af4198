#include <doctest/doctest.h>

#include "rankrun/worker_context.hpp"

using rankrun::EnvMap;
using rankrun::parse_worker_env;

namespace {

EnvMap launched(int rank, int local_rank, int world, int local_world) {
  return {{"RANK", std::to_string(rank)},        {"LOCAL_RANK", std::to_string(local_rank)},
          {"WORLD_SIZE", std::to_string(world)}, {"LOCAL_WORLD_SIZE", std::to_string(local_world)},
          {"MASTER_ADDR", "127.0.0.1"},          {"MASTER_PORT", "29500"}};
}

// The single error message, which must mention every given fragment.
void require_error(const EnvMap& env, std::initializer_list<const char*> fragments) {
  auto result = parse_worker_env(env);
  REQUIRE_FALSE(result.ok());
  const std::string message = result.error_message();
  for (const char* fragment : fragments) {
    INFO("message: " << message);
    CHECK(message.find(fragment) != std::string::npos);
  }
}

}  // namespace

TEST_CASE("an empty environment is a world of one") {
  auto result = parse_worker_env({});
  REQUIRE(result.ok());
  const auto& c = *result.context;
  CHECK(c.rank == 0);
  CHECK(c.local_rank == 0);
  CHECK(c.world_size == 1);
  CHECK(c.local_world_size == 1);
  CHECK_FALSE(c.launched);
  CHECK_FALSE(c.has_store());
  CHECK(c.restart_count == 0);
  CHECK(c.error_file.empty());
}

TEST_CASE("a full launcher environment is read") {
  EnvMap env = launched(5, 1, 8, 4);
  env["TORCHELASTIC_RESTART_COUNT"] = "2";
  env["TORCHELASTIC_ERROR_FILE"] = "/tmp/x/error.json";
  env["CUDA_VISIBLE_DEVICES"] = "3";
  auto result = parse_worker_env(env);
  REQUIRE(result.ok());
  const auto& c = *result.context;
  CHECK(c.rank == 5);
  CHECK(c.local_rank == 1);
  CHECK(c.world_size == 8);
  CHECK(c.local_world_size == 4);
  CHECK(c.master_addr == "127.0.0.1");
  CHECK(c.master_port == 29500);
  CHECK(c.restart_count == 2);
  CHECK(c.error_file == "/tmp/x/error.json");
  CHECK(c.cuda_visible_devices == std::optional<std::string>("3"));
  CHECK(c.launched);
  CHECK(c.has_store());
}

TEST_CASE("every valid rank of worlds 1..8 is accepted") {
  for (int world = 1; world <= 8; ++world)
    for (int rank = 0; rank < world; ++rank) {
      CAPTURE(world);
      CAPTURE(rank);
      CHECK(parse_worker_env(launched(rank, rank % 2, world, world == 1 ? 1 : 2)).ok());
    }
}

TEST_CASE("rank out of range names both values") {
  require_error(launched(4, 0, 4, 4), {"RANK=4", "WORLD_SIZE=4"});
  require_error(launched(1, 2, 4, 2), {"LOCAL_RANK=2", "LOCAL_WORLD_SIZE=2"});
  require_error(launched(0, 0, 2, 4), {"LOCAL_WORLD_SIZE=4", "WORLD_SIZE=2"});
}

TEST_CASE("non-numeric and negative values are rejected with the value") {
  for (const char* bad : {"abc", "-1", "+1", " 1", "1 ", "1.0", "0x1", "", "99999999999999999999"}) {
    EnvMap env = launched(0, 0, 2, 2);
    env["RANK"] = bad;
    CAPTURE(bad);
    require_error(env, {"RANK='", "not a non-negative integer"});
  }
  EnvMap env = launched(0, 0, 2, 2);
  env["WORLD_SIZE"] = "two";
  require_error(env, {"WORLD_SIZE='two'"});
}

TEST_CASE("zero world sizes are rejected") {
  require_error(launched(0, 0, 0, 1), {"WORLD_SIZE='0' must be at least 1"});
  require_error(launched(0, 0, 1, 0), {"LOCAL_WORLD_SIZE='0' must be at least 1"});
}

TEST_CASE("some rank variables set and others not names the missing ones") {
  require_error({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}},
                {"RANK='1'", "WORLD_SIZE='2'", "LOCAL_RANK, LOCAL_WORLD_SIZE are not"});
  require_error({{"LOCAL_RANK", "0"}}, {"LOCAL_RANK='0' is set", "RANK, WORLD_SIZE, LOCAL_WORLD_SIZE are not"});
}

TEST_CASE("the store address must be complete and valid") {
  EnvMap env = launched(0, 0, 2, 2);
  env.erase("MASTER_PORT");
  require_error(env, {"MASTER_ADDR='127.0.0.1' is set but MASTER_PORT is not"});

  env = launched(0, 0, 2, 2);
  env.erase("MASTER_ADDR");
  require_error(env, {"MASTER_PORT='29500' is set but MASTER_ADDR is not"});

  env = launched(0, 0, 2, 2);
  env.erase("MASTER_ADDR");
  env.erase("MASTER_PORT");
  require_error(env, {"WORLD_SIZE=2 needs the store"});

  for (const char* bad : {"0", "65536", "http", "-5"}) {
    env = launched(0, 0, 2, 2);
    env["MASTER_PORT"] = bad;
    CAPTURE(bad);
    require_error(env, {"MASTER_PORT='", "is not a port number"});
  }
}

TEST_CASE("a launched world of one does not need a store") {
  EnvMap env = launched(0, 0, 1, 1);
  env.erase("MASTER_ADDR");
  env.erase("MASTER_PORT");
  auto result = parse_worker_env(env);
  REQUIRE(result.ok());
  CHECK(result.context->launched);
  CHECK_FALSE(result.context->has_store());
}

TEST_CASE("all problems are reported at once") {
  EnvMap env = launched(9, 7, 4, 2);
  env["TORCHELASTIC_RESTART_COUNT"] = "x";
  auto result = parse_worker_env(env);
  REQUIRE_FALSE(result.ok());
  CHECK(result.errors.size() == 3);
}

TEST_CASE("bad restart count is named") {
  EnvMap env = launched(0, 0, 2, 2);
  env["TORCHELASTIC_RESTART_COUNT"] = "-1";
  require_error(env, {"TORCHELASTIC_RESTART_COUNT='-1'"});
}

TEST_CASE("CUDA device: 0 under pinning, else LOCAL_RANK") {
  rankrun::WorkerContext c;
  c.local_rank = 3;
  CHECK(rankrun::select_cuda_device(c) == 3);
  c.cuda_visible_devices = "5";
  CHECK(rankrun::select_cuda_device(c) == 0);
  c.cuda_visible_devices = "GPU-8f1c2d3e";
  CHECK(rankrun::select_cuda_device(c) == 0);
  c.cuda_visible_devices = "0,1,2,3";
  CHECK(rankrun::select_cuda_device(c) == 3);
  c.cuda_visible_devices = "0,1";
  CHECK_THROWS_WITH_AS(rankrun::select_cuda_device(c), doctest::Contains("LOCAL_RANK=3"), rankrun::EnvError);
  c.cuda_visible_devices = "";
  CHECK_THROWS_AS(rankrun::select_cuda_device(c), rankrun::EnvError);
}

TEST_CASE("the heartbeat interval rankrun asks for is read and validated with the rest") {
  EnvMap env = launched(0, 0, 2, 2);
  CHECK_FALSE(rankrun::parse_worker_env(env).context->heartbeat_interval_ms);
  env["RANKRUN_HEARTBEAT_INTERVAL_MS"] = "250";
  CHECK(rankrun::parse_worker_env(env).context->heartbeat_interval_ms == 250);
  env["RANKRUN_HEARTBEAT_INTERVAL_MS"] = "0";
  require_error(env, {"RANKRUN_HEARTBEAT_INTERVAL_MS='0'"});
  env["RANKRUN_HEARTBEAT_INTERVAL_MS"] = "fast";
  require_error(env, {"RANKRUN_HEARTBEAT_INTERVAL_MS='fast'"});
}
