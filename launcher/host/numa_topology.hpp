#pragma once
// What --numa-binding reads from the machine (launcher/config/numa_plan.hpp decides with it):
// sysfs's NUMA nodes, their CPUs' cores, packages and caches, a PCI device's node, the CPUs
// rankrun may use, and whether the kernel takes a preferred-node memory policy here.

#include <optional>
#include <string>
#include <vector>

#include "launcher/config/numa_plan.hpp"

namespace rankrun::launcher {

/// /sys/devices/system/node/node<N>/cpulist, and of each of a node's CPUs (node<N>/cpu<M>/)
/// topology/physical_package_id, topology/thread_siblings_list and the shared_cpu_list of its
/// highest-level data or unified cache. Empty when sysfs has no nodes.
NumaTopology read_numa_topology();

/// /sys/bus/pci/devices/<address>/numa_node: the node of a PCI device, -1 (none) read as node 0,
/// as torch reads it; nullopt when there is no such device.
std::optional<int> pci_numa_node(const std::string& address);

/// The CPUs this process may run on (its affinity: Slurm's and the cgroup's cpusets).
std::vector<int> allowed_cpus();

/// Whether the kernel lets a thread prefer memory of `node` (set_mempolicy(MPOL_PREFERRED)),
/// tried in a thread of its own; the error's text when not (a container that forbids it, a node
/// the kernel does not have).
std::optional<std::string> memory_policy_refused(int node);

}  // namespace rankrun::launcher
