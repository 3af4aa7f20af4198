#pragma once
// Inside a Slurm job step rankrun configures itself from SLURM_*: the node count, this node's
// rank, the first host of the step's node list (node 0, which hosts the store), a port derived
// from the job and step, the run id. Pure: the environment comes in, the plan goes out; the
// effectful shell resolves the host name and applies the plan to the options the user did not
// give.

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace rankrun::launcher {

/// Expands Slurm's hostlist grammar as `scontrol show hostnames` does: comma-separated
/// entries, each a name with bracket groups of numbers and ranges ("gpu[01-04,07]",
/// "rack[1-2]-n[1-3]": every combination, the last group varying fastest), zero padding kept
/// as written. Throws std::invalid_argument naming the fault on a malformed list, and beyond
/// `max_hosts` names.
std::vector<std::string> expand_hostlist(std::string_view list, std::size_t max_hosts = 1 << 20);

/// Where one value of the configuration came from, for -v.
struct SlurmSource {
  std::string what;   // "--nnodes"
  std::string value;  // "3"
  std::string from;   // "SLURM_STEP_NUM_NODES"
};

/// What Slurm says about this job step. Values the user gave on the command line are not
/// replaced (see apply in the shell); `sources` lists every value derived.
struct SlurmPlan {
  int nnodes = 1;
  int node_rank = 0;
  std::string first_host;  // a name from the node list, still to be resolved
  std::uint16_t master_port = 0;
  std::string run_id;  // "<job id>.<step id>"
  std::string job_id;
  std::optional<std::string> gpus;  // SLURM_STEP_GPUS when CUDA_VISIBLE_DEVICES is unset
  std::vector<SlurmSource> sources;
};

/// A wrong set-up under Slurm; the message names the fix.
struct SlurmError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// nullopt outside Slurm (no SLURM_JOB_ID). Inside the batch script itself (no SLURM_STEP_ID)
/// a one-node allocation is a one-node job; more nodes are a SlurmError ("use srun"). More
/// than one task of the step per node is a SlurmError unless `tasks_per_node_ok`, in which case
/// every task is a node of the job (nnodes = tasks, node rank = SLURM_PROCID).
std::optional<SlurmPlan> slurm_plan(const std::map<std::string, std::string>& env, bool tasks_per_node_ok);

/// The store's port for a job step: 20000-29999 from a hash of "<job>.<step>", the same on
/// every node; below the kernel's ephemeral range, so a client socket never holds it.
std::uint16_t slurm_port(std::string_view job_id, std::string_view step_id);

/// "2(x3),1" (SLURM_STEP_TASKS_PER_NODE) -> the largest count, 2; nullopt when malformed.
std::optional<int> max_tasks_per_node(std::string_view spec);

/// The NodeAddr= of `scontrol show node NAME -o` output, if any.
std::optional<std::string> node_addr_in(std::string_view scontrol_output);

}  // namespace rankrun::launcher
