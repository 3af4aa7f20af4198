// --numa-binding's plan (launcher/config/numa_plan): each worker's CPUs from its GPU's NUMA node,
// on machines described as sysfs describes them.
#include <doctest/doctest.h>

#include "launcher/types/launch_error.hpp"
#include "launcher/config/numa_plan.hpp"

using namespace rankrun::launcher;

namespace {

using Cpus = std::vector<int>;

std::vector<int> range(int first, int last) {
  std::vector<int> out;
  for (int c = first; c <= last; ++c) out.push_back(c);
  return out;
}

// Two sockets, one node each, 8 CPUs per node: cores are pairs of hyperthreads (c, c+8 within the
// socket's 16), and each node has two last-level caches of 4 cores.
NumaTopology two_sockets() {
  NumaTopology t;
  t.node_cpus[0] = range(0, 7);
  t.node_cpus[1] = range(8, 15);
  for (int c = 0; c < 16; ++c) {
    t.cpu_package[c] = c / 8;
    const int base = c / 8 * 8;
    const int core = (c % 8) % 4;  // 4 cores per node, two threads each: {0,4}, {1,5}, ...
    t.cpu_siblings[c] = {base + core, base + core + 4};
    t.cpu_llc[c] =
        (c % 8) % 4 < 2 ? Cpus{base, base + 1, base + 4, base + 5} : Cpus{base + 2, base + 3, base + 6, base + 7};
  }
  return t;
}

std::vector<NumaWorker> on_nodes(std::vector<int> nodes) {
  std::vector<NumaWorker> out;
  for (int n : nodes) out.push_back(NumaWorker{n < 0 ? std::nullopt : std::optional<int>(n)});
  return out;
}

}  // namespace

TEST_CASE("cpu lists as sysfs and taskset write them") {
  CHECK(parse_cpu_list("0-3,8,10-11") == Cpus{0, 1, 2, 3, 8, 10, 11});
  CHECK(parse_cpu_list("5\n") == Cpus{5});
  CHECK(parse_cpu_list("")->empty());
  CHECK_FALSE(parse_cpu_list("3-1"));
  CHECK_FALSE(parse_cpu_list("a"));
  CHECK_FALSE(parse_cpu_list("1,,2"));
  CHECK(format_cpu_list({3, 0, 1, 2, 8, 10, 11}) == "0-3,8,10-11");
  CHECK(format_cpu_list({}).empty());
  CHECK(parse_numa_mode("core-complex") == NumaMode::CoreComplex);
  CHECK_FALSE(parse_numa_mode("rack"));
}

TEST_CASE("node: the CPUs of each worker's own GPU's node, whatever its local rank") {
  const auto t = two_sockets();
  // GPUs given out of order: local rank 0 has a GPU of node 1
  const auto cpus = plan_numa_cpus(NumaMode::Node, t, on_nodes({1, 0, -1}), range(0, 15));
  CHECK(cpus[0] == range(8, 15));
  CHECK(cpus[1] == range(0, 7));
  CHECK(cpus[2].empty());  // no GPU: not bound
}

TEST_CASE("node: only the CPUs rankrun may use (a cpuset narrower than the node)") {
  const auto t = two_sockets();
  CHECK(plan_numa_cpus(NumaMode::Node, t, on_nodes({0}), {2, 3, 9})[0] == Cpus{2, 3});
  CHECK_THROWS_WITH_AS(plan_numa_cpus(NumaMode::Node, t, on_nodes({1}), {0, 1}),
                       doctest::Contains("local rank 0's GPU is on NUMA node 1 (CPUs 8-15), and rankrun may use none"),
                       LaunchError);
}

TEST_CASE("socket: every node of the GPU's socket") {
  auto t = two_sockets();
  t.node_cpus[2] = {16, 17};  // a third node on socket 0 (a sub-NUMA cluster)
  t.cpu_package[16] = t.cpu_package[17] = 0;
  const auto cpus = plan_numa_cpus(NumaMode::Socket, t, on_nodes({0, 1}), range(0, 17));
  CHECK(cpus[0] == Cpus{0, 1, 2, 3, 4, 5, 6, 7, 16, 17});
  CHECK(cpus[1] == range(8, 15));
}

TEST_CASE("exclusive: the node's cores split among its workers, no core shared") {
  const auto t = two_sockets();
  // three workers on node 0 (4 cores: 2, 1, 1), one on node 1 (all 4)
  const auto cpus = plan_numa_cpus(NumaMode::Exclusive, t, on_nodes({0, 0, 1, 0}), range(0, 15));
  CHECK(cpus[0] == Cpus{0, 1, 4, 5});
  CHECK(cpus[1] == Cpus{2, 6});
  CHECK(cpus[3] == Cpus{3, 7});
  CHECK(cpus[2] == range(8, 15));
  CHECK_THROWS_WITH(plan_numa_cpus(NumaMode::Exclusive, t, on_nodes({0, 0, 0, 0, 0}), range(0, 15)),
                    doctest::Contains("5 workers have GPUs on NUMA node 0 (CPUs 0-7), which has 4 physical cores"));
}

TEST_CASE("core-complex: the n-th worker of a node takes its n-th last-level cache, largest first") {
  auto t = two_sockets();
  const auto cpus = plan_numa_cpus(NumaMode::CoreComplex, t, on_nodes({0, 0, 0}), range(0, 15));
  CHECK(cpus[0] == Cpus{0, 1, 4, 5});
  CHECK(cpus[1] == Cpus{2, 3, 6, 7});
  CHECK(cpus[2] == Cpus{0, 1, 4, 5});  // modulo the number of complexes
  // a cpuset that leaves one complex smaller: the larger comes first
  const auto narrowed = plan_numa_cpus(NumaMode::CoreComplex, t, on_nodes({0}), {0, 2, 3, 6});
  CHECK(narrowed[0] == Cpus{2, 3, 6});
}
