#include "launcher/host/numa_topology.hpp"

#include "base/parse_number.hpp"

#include <dirent.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

namespace rankrun::launcher {
namespace {

constexpr const char* k_nodes = "/sys/devices/system/node";
constexpr int k_mpol_preferred = 1;  // linux/mempolicy.h

std::optional<std::string> read_text(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

std::optional<int> read_int(const std::string& path) {
  const auto text = read_text(path);
  if (!text) return std::nullopt;
  return parse_number<int>(*text);
}

// The names in `dir` that are `prefix` followed by a number, as numbers.
std::vector<int> numbered(const std::string& dir, const std::string& prefix) {
  std::vector<int> out;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return out;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
    const auto rest = name.substr(prefix.size());
    if (const auto n = parse_number<int>(rest); n && *n >= 0) out.push_back(*n);
  }
  ::closedir(d);
  return out;
}

}  // namespace

NumaTopology read_numa_topology() {
  NumaTopology t;
  for (int node : numbered(k_nodes, "node")) {
    const std::string node_dir = std::string(k_nodes) + "/node" + std::to_string(node);
    const auto list = read_text(node_dir + "/cpulist");
    const auto cpus = list ? parse_cpu_list(*list) : std::nullopt;
    if (!cpus) continue;
    t.node_cpus[node] = *cpus;
    for (int cpu : *cpus) {
      const std::string cpu_dir = node_dir + "/cpu" + std::to_string(cpu);
      if (const auto package = read_int(cpu_dir + "/topology/physical_package_id")) t.cpu_package[cpu] = *package;
      if (const auto siblings = read_text(cpu_dir + "/topology/thread_siblings_list")) {
        if (const auto parsed = parse_cpu_list(*siblings)) t.cpu_siblings[cpu] = *parsed;
      }
      int best_level = -1;
      for (int index : numbered(cpu_dir + "/cache", "index")) {
        const std::string cache = cpu_dir + "/cache/index" + std::to_string(index);
        const auto type = read_text(cache + "/type");
        const auto level = read_int(cache + "/level");
        const auto shared = read_text(cache + "/shared_cpu_list");
        if (!type || (*type != "Unified" && *type != "Data") || !level || !shared || *level <= best_level) continue;
        if (const auto parsed = parse_cpu_list(*shared)) {
          t.cpu_llc[cpu] = *parsed;
          best_level = *level;
        }
      }
    }
  }
  return t;
}

std::optional<int> pci_numa_node(const std::string& address) {
  const auto node = read_int("/sys/bus/pci/devices/" + address + "/numa_node");
  if (!node) return std::nullopt;
  return *node < 0 ? 0 : *node;
}

std::vector<int> allowed_cpus() {
  std::vector<int> out;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return out;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) out.push_back(cpu);
  }
  return out;
}

std::optional<std::string> memory_policy_refused(int node) {
  if (node < 0 || node >= 1024) return std::string("no such node");
  int error = 0;
  // A policy is a thread's own: this thread's ends with it.
  std::thread probe([&error, node] {
    unsigned long mask[1024 / (8 * sizeof(unsigned long))] = {};
    mask[static_cast<std::size_t>(node) / (8 * sizeof(unsigned long))] |=
        1UL << (static_cast<unsigned>(node) % (8 * sizeof(unsigned long)));
    if (::syscall(SYS_set_mempolicy, k_mpol_preferred, mask, 1024UL) != 0) error = errno;
  });
  probe.join();
  if (error == 0) return std::nullopt;
  return std::string(std::strerror(error));
}

}  // namespace rankrun::launcher
