#include "launcher/job/rank_plan.hpp"

#include "launcher/config/gpu_list.hpp"

namespace rankrun::launcher {

std::vector<WorkerPlan> plan_workers(const LaunchConfig& c) {
  return plan_workers(c, c.node_rank * c.nproc, c.nproc * c.nnodes);
}

std::vector<WorkerPlan> plan_workers(const LaunchConfig& c, int first_rank, int world) {
  return plan_workers(c, first_rank, world, c.node_rank, c.nnodes);
}

std::vector<WorkerPlan> plan_workers(const LaunchConfig& c, int first_rank, int world, int node_rank, int nnodes) {
  std::vector<WorkerPlan> plans;
  plans.reserve(static_cast<std::size_t>(c.nproc));
  for (int local = 0; local < c.nproc; ++local) {
    WorkerPlan p;
    p.local_rank = local;
    p.rank = first_rank + local;
    p.world_size = world;
    p.local_world_size = c.nproc;
    p.group_rank = node_rank;
    p.group_world_size = nnodes;
    p.role_rank = p.rank;  // one role per job
    p.role_world_size = world;
    if (c.pin) {
      p.cuda_visible_devices = c.gpus[static_cast<std::size_t>(local)];
    } else if (c.gpu_source == GpuSource::Flag) {
      p.cuda_visible_devices = join_gpus(c.gpus);
    }
    plans.push_back(std::move(p));
  }
  return plans;
}

}  // namespace rankrun::launcher
