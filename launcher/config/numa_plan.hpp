#pragma once
// --numa-binding: which CPUs each worker runs on, from the NUMA node of the GPU it really has
// (the one rankrun pins it to, by index or UUID, read through NVML's PCI bus id), not from its
// local rank as torch assumes. Pure: the machine's topology comes in as read from sysfs
// (launcher/host/numa_topology.hpp), the CPUs rankrun may use as its own affinity (Slurm's and
// the cgroup's cpusets). The modes are torch's (torch/numa/binding.py):
//   node          the allowed CPUs of the GPU's NUMA node
//   socket        those of every node of the socket (physical package) the GPU's node is on
//   exclusive     the node's physical cores split evenly among the workers whose GPUs are on that
//                 node (in local-rank order), the remainder one core each to the first; no two
//                 workers share a core
//   core-complex  the CPUs that share one last-level cache: the node's groups by size, largest
//                 first, the n-th worker of the node taking group n modulo their number

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace rankrun::launcher {

enum class NumaMode { Node, Socket, Exclusive, CoreComplex };

/// "node", "socket", "exclusive", "core-complex" -> the mode; nullopt otherwise.
std::optional<NumaMode> parse_numa_mode(const std::string& name);
std::string numa_mode_name(NumaMode mode);

/// What sysfs says of the machine's NUMA nodes and CPUs.
struct NumaTopology {
  std::map<int, std::vector<int>> node_cpus;     // node -> its CPUs (nodeN/cpulist)
  std::map<int, int> cpu_package;                // cpu -> physical_package_id
  std::map<int, std::vector<int>> cpu_siblings;  // cpu -> the CPUs of its core (thread_siblings_list)
  std::map<int, std::vector<int>> cpu_llc;       // cpu -> the CPUs sharing its last-level cache
};

/// "0-3,8,10-11" -> {0,1,2,3,8,10,11}; nullopt when it is not a CPU list. An empty text is empty.
std::optional<std::vector<int>> parse_cpu_list(const std::string& text);
/// {0,1,2,3,8} -> "0-3,8".
std::string format_cpu_list(const std::vector<int>& cpus);

/// The NUMA node of each worker's GPU (nullopt: the worker has no GPU, or its node is unknown).
/// sysfs's -1 (no node) counts as node 0, as torch takes it.
struct NumaWorker {
  std::optional<int> node;
};

/// Each worker's CPUs under `mode` (sorted; empty: not bound). Throws LaunchError naming
/// --numa-binding, the worker's node and the CPUs when a worker with a node would get none
/// (its node has none of the `allowed` CPUs; fewer cores than workers under exclusive).
std::vector<std::vector<int>> plan_numa_cpus(NumaMode mode, const NumaTopology& topology,
                                             const std::vector<NumaWorker>& workers, const std::vector<int>& allowed);

}  // namespace rankrun::launcher
