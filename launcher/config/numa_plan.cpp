#include "launcher/config/numa_plan.hpp"

#include "base/parse_number.hpp"
#include "base/range_list.hpp"
#include "base/text.hpp"

#include <algorithm>
#include <set>

#include "launcher/types/launch_error.hpp"

namespace rankrun::launcher {
namespace {

std::vector<int> intersect(const std::vector<int>& a, const std::vector<int>& b) {
  std::vector<int> out;
  std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(out));
  return out;
}

std::vector<int> sorted(std::vector<int> v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

// The node's allowed CPUs in groups by `key` (each CPU's core, or its cache): a group is the
// allowed CPUs of the node that share the key; a CPU sysfs says nothing of is a group alone.
std::vector<std::vector<int>> groups_of(const std::vector<int>& cpus, const std::map<int, std::vector<int>>& key) {
  std::map<std::vector<int>, std::vector<int>> groups;
  for (int cpu : cpus) {
    const auto it = key.find(cpu);
    groups[it == key.end() ? std::vector<int>{cpu} : sorted(it->second)].push_back(cpu);
  }
  std::vector<std::vector<int>> out;
  for (auto& [k, members] : groups) out.push_back(sorted(members));
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.front() < b.front(); });
  return out;
}

std::string node_text(int node, const std::vector<int>& cpus) {
  return "NUMA node " + std::to_string(node) + " (CPUs " + (cpus.empty() ? "none" : format_cpu_list(cpus)) + ")";
}

}  // namespace

std::optional<NumaMode> parse_numa_mode(const std::string& name) {
  if (name == "node") return NumaMode::Node;
  if (name == "socket") return NumaMode::Socket;
  if (name == "exclusive") return NumaMode::Exclusive;
  if (name == "core-complex") return NumaMode::CoreComplex;
  return std::nullopt;
}

std::string numa_mode_name(NumaMode mode) {
  switch (mode) {
    case NumaMode::Node: return "node";
    case NumaMode::Socket: return "socket";
    case NumaMode::Exclusive: return "exclusive";
    case NumaMode::CoreComplex: return "core-complex";
  }
  return "node";
}

std::optional<std::vector<int>> parse_cpu_list(const std::string& text) {
  const auto list = parse_range_list(trim_space(text), (1 << 16) - 1);
  if (!list) return std::nullopt;
  return sorted(*list);
}

std::string format_cpu_list(const std::vector<int>& cpus) { return format_range_list(sorted(cpus)); }

std::vector<std::vector<int>> plan_numa_cpus(NumaMode mode, const NumaTopology& topology,
                                             const std::vector<NumaWorker>& workers, const std::vector<int>& allowed) {
  const auto allowed_sorted = sorted(allowed);
  const auto node_allowed = [&](int node) {
    const auto it = topology.node_cpus.find(node);
    return it == topology.node_cpus.end() ? std::vector<int>{} : intersect(sorted(it->second), allowed_sorted);
  };
  const auto all_of_node = [&](int node) {
    const auto it = topology.node_cpus.find(node);
    return it == topology.node_cpus.end() ? std::vector<int>{} : sorted(it->second);
  };
  // The workers of each node, in local-rank order (exclusive and core-complex share a node out).
  std::map<int, std::vector<std::size_t>> on_node;
  for (std::size_t i = 0; i < workers.size(); ++i) {
    if (workers[i].node) on_node[*workers[i].node].push_back(i);
  }
  std::vector<std::vector<int>> out(workers.size());
  for (std::size_t i = 0; i < workers.size(); ++i) {
    if (!workers[i].node) continue;
    const int node = *workers[i].node;
    const auto cpus = node_allowed(node);
    if (cpus.empty()) {
      throw LaunchError("--numa-binding=" + numa_mode_name(mode) + ": local rank " + std::to_string(i) +
                        "'s GPU is on " + node_text(node, all_of_node(node)) + ", and rankrun may use none of them (" +
                        "its CPUs: " + format_cpu_list(allowed_sorted) +
                        "); give rankrun CPUs of that node (Slurm's --cpus-per-task, taskset) or leave the option out");
    }
    const auto& peers = on_node[node];
    const auto index = static_cast<std::size_t>(std::find(peers.begin(), peers.end(), i) - peers.begin());
    switch (mode) {
      case NumaMode::Node: out[i] = cpus; break;
      case NumaMode::Socket: {
        const auto package = topology.cpu_package.find(all_of_node(node).front());
        if (package == topology.cpu_package.end()) {
          out[i] = cpus;
          break;
        }
        std::vector<int> socket;
        for (const auto& [other, other_cpus] : topology.node_cpus) {
          const auto all = sorted(other_cpus);
          if (all.empty()) continue;
          const auto p = topology.cpu_package.find(all.front());
          if (p != topology.cpu_package.end() && p->second == package->second) {
            const auto mine = node_allowed(other);
            socket.insert(socket.end(), mine.begin(), mine.end());
          }
        }
        out[i] = sorted(socket);
        break;
      }
      case NumaMode::Exclusive: {
        const auto cores = groups_of(cpus, topology.cpu_siblings);
        if (cores.size() < peers.size()) {
          throw LaunchError(
              "--numa-binding=exclusive: " + std::to_string(peers.size()) + " workers have GPUs on " +
              node_text(node, cpus) + ", which has " + std::to_string(cores.size()) + " physical core" +
              (cores.size() == 1 ? "" : "s") +
              " rankrun may use: fewer than one each; use --numa-binding=node, or give rankrun more CPUs");
        }
        const std::size_t base = cores.size() / peers.size();
        const std::size_t extra = cores.size() % peers.size();
        const std::size_t first = index * base + std::min(index, extra);
        const std::size_t count = base + (index < extra ? 1 : 0);
        for (std::size_t c = first; c < first + count; ++c)
          out[i].insert(out[i].end(), cores[c].begin(), cores[c].end());
        out[i] = sorted(out[i]);
        break;
      }
      case NumaMode::CoreComplex: {
        auto complexes = groups_of(cpus, topology.cpu_llc);
        std::stable_sort(complexes.begin(), complexes.end(), [](const auto& a, const auto& b) {
          return a.size() != b.size() ? a.size() > b.size() : a.front() < b.front();
        });
        out[i] = complexes[index % complexes.size()];
        break;
      }
    }
  }
  return out;
}

}  // namespace rankrun::launcher
