#include <doctest/doctest.h>

#include "launcher/job/rank_plan.hpp"

using namespace rankrun::launcher;

TEST_CASE("ranks and pinned GPUs of one node") {
  LaunchConfig c;
  c.nproc = 4;
  c.gpus = {"3", "2", "1", "0"};
  c.gpu_source = GpuSource::CudaVisibleDevices;
  c.pin = true;
  const auto plans = plan_workers(c);
  REQUIRE(plans.size() == 4);
  for (int i = 0; i < 4; ++i) {
    const auto& p = plans[static_cast<std::size_t>(i)];
    CHECK(p.local_rank == i);
    CHECK(p.rank == i);
    CHECK(p.world_size == 4);
    CHECK(p.local_world_size == 4);
    CHECK(p.group_rank == 0);
    CHECK(p.group_world_size == 1);
    CHECK(p.role_rank == i);
    CHECK(p.role_world_size == 4);
    CHECK(*p.cuda_visible_devices == c.gpus[static_cast<std::size_t>(i)]);
  }
}

TEST_CASE("without pinning the GPU list is inherited or given whole") {
  LaunchConfig c;
  c.nproc = 2;
  c.gpus = {"0", "1"};
  c.gpu_source = GpuSource::CudaVisibleDevices;
  c.pin = false;
  CHECK_FALSE(plan_workers(c)[1].cuda_visible_devices.has_value());
  c.gpu_source = GpuSource::Flag;
  CHECK(*plan_workers(c)[1].cuda_visible_devices == "0,1");
}

TEST_CASE("a node's first rank follows the node rank") {
  LaunchConfig c;
  c.nproc = 2;
  c.nnodes = 3;
  c.node_rank = 2;
  c.pin = false;
  const auto plans = plan_workers(c);
  CHECK(plans[0].rank == 4);
  CHECK(plans[1].rank == 5);
  CHECK(plans[1].world_size == 6);
  CHECK(plans[1].group_world_size == 3);
}

TEST_CASE("elastic: the round's node rank and node count are GROUP_RANK and GROUP_WORLD_SIZE") {
  LaunchConfig c;
  c.nproc = 2;
  c.nnodes = 3;     // MAX
  c.node_rank = 0;  // not decided by the command line in an elastic job
  const auto plans = plan_workers(c, 2, 4, 1, 2);
  REQUIRE(plans.size() == 2);
  CHECK(plans[0].rank == 2);
  CHECK(plans[1].rank == 3);
  CHECK(plans[0].group_rank == 1);
  CHECK(plans[1].group_world_size == 2);
  CHECK(plans[0].world_size == 4);
}
