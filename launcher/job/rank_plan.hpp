#pragma once
// Which worker gets which rank and which GPU. Pure.

#include <optional>
#include <string>
#include <vector>

#include "launcher/config/options.hpp"

namespace rankrun::launcher {

struct WorkerPlan {
  int local_rank = 0;
  int rank = 0;
  int world_size = 1;
  int local_world_size = 1;
  int group_rank = 0;
  int group_world_size = 1;
  int role_rank = 0;
  int role_world_size = 1;
  /// The worker's CUDA_VISIBLE_DEVICES: its one GPU under pinning, every GPU under --no-pin
  /// with --gpus, absent when the launcher's own value is simply inherited.
  std::optional<std::string> cuda_visible_devices;
};

/// One plan per local worker of this node, before any rendezvous: the node's first global
/// rank is node_rank * nproc (right on one node).
std::vector<WorkerPlan> plan_workers(const LaunchConfig& config);
/// The same once the rendezvous placed this node: its first global rank and the job's world
/// size (nodes may run different numbers of workers).
std::vector<WorkerPlan> plan_workers(const LaunchConfig& config, int first_rank, int world_size);
/// The same for a node the rendezvous placed: `node_rank` of `nnodes` (GROUP_RANK,
/// GROUP_WORLD_SIZE), which an elastic job's rounds decide.
std::vector<WorkerPlan> plan_workers(const LaunchConfig& config, int first_rank, int world_size, int node_rank,
                                     int nnodes);

}  // namespace rankrun::launcher
