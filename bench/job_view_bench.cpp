// What deciding hangs for a whole job costs node rank 0 at each look (docs/benchmarks/job-view.md, "The
// job-wide hang view"): N nodes of 8 ranks each, every rank in all_reduce with two process
// groups (one collective pending), as the nodes' progress records say. Per look node 0 decodes
// the other nodes' records, builds the job's ranks, runs the hang policy and the straggler
// warning on them, and, once a hang is found, matches the ranks' flight recorder summaries.
//
//   rankrun_job_view_bench [--nodes 16,64,256] [--ranks-per-node 8] [--looks 200]
//
// Prints a Markdown table: the record's size, the bytes node 0 reads per look (every node's
// record), and the median (and max) microseconds of each step.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "bench/bench_cli.hpp"
#include "bench/bench_util.hpp"
#include "launcher/cluster/progress.hpp"
#include "launcher/hangs/flight_match.hpp"
#include "launcher/hangs/job_view.hpp"

using namespace rankrun::launcher;
using Clock = std::chrono::steady_clock;

namespace {

cluster::NodeProgress node_progress(int node, int per_node) {
  cluster::NodeProgress p;
  p.node_rank = node;
  p.seq = 100;
  for (int l = 0; l < per_node; ++l) {
    cluster::RankProgress r;
    r.rank = node * per_node + l;
    r.still_seconds = 120;
    r.in = "all_reduce";
    r.at = "train.py:214 in train_one_batch";
    r.groups = {GroupProgress{"0", 104200, -1, 104199, "nccl:all_reduce", "default_pg"},
                GroupProgress{"1", 5210, 5210, 5210, "", ""}};
    p.ranks.push_back(std::move(r));
  }
  return p;
}

struct Timing {
  std::vector<double> us;
  void add(Clock::time_point a, Clock::time_point b) {
    us.push_back(std::chrono::duration<double, std::micro>(b - a).count());
  }
  double median() const { return rankrun::bench::median(us); }
  double max() const { return *std::max_element(us.begin(), us.end()); }
};

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> node_counts{16, 64, 256};
  int per_node = 8;
  int looks = 200;
  CLI::App app{"What deciding hangs for the whole job costs node rank 0 per look (docs/benchmarks/job-view.md).",
               "rankrun_job_view_bench"};
  app.add_option("--nodes", node_counts, "node counts, comma-separated")
      ->delimiter(',')
      ->check(rankrun::bench::at_least(1))
      ->capture_default_str();
  app.add_option("--ranks-per-node", per_node, "ranks of each node")
      ->check(rankrun::bench::at_least(1))
      ->capture_default_str();
  app.add_option("--looks", looks, "looks timed per node count")
      ->check(rankrun::bench::at_least(1))
      ->capture_default_str();
  if (const auto rc = rankrun::bench::parse_command_line(app, argc, argv)) return *rc;
  std::printf(
      "| nodes x ranks | record, bytes | node 0 reads per look, KiB | decode, µs | job view + policy, µs | "
      "flight match on a hang, µs |\n|---|---|---|---|---|---|\n");
  for (const int nodes : node_counts) {
    std::vector<std::string> records;
    for (int n = 1; n < nodes; ++n) records.push_back(cluster::encode(node_progress(n, per_node)));
    std::size_t bytes = 0;
    for (const auto& r : records) bytes += r.size();
    std::vector<RankActivity> local(static_cast<std::size_t>(per_node));
    std::vector<int> global;
    const auto t0 = HangClock::now();
    for (int l = 0; l < per_node; ++l) {
      local[static_cast<std::size_t>(l)].started = t0;
      local[static_cast<std::size_t>(l)].in = "all_reduce";
      global.push_back(l);
    }
    HangTimeouts timeouts;
    timeouts.progress_timeout = Seconds(180);
    timeouts.straggler_timeout = Seconds(1800);
    Timing decode, policy, match;
    std::size_t found = 0;
    for (int look = 0; look < looks; ++look) {
      const auto a = Clock::now();
      std::vector<ReceivedProgress> remote;
      remote.reserve(records.size());
      for (const auto& r : records) {
        auto p = cluster::decode_progress(r);
        if (p) remote.push_back({std::move(*p), t0});
      }
      const auto b = Clock::now();
      const auto all = job_activity(local, global, remote, nodes * per_node, t0);
      const auto now = t0 + std::chrono::seconds(200);
      if (all) {
        if (check_hang(*all, timeouts, now)) ++found;
        (void)straggler_warning(*all, timeouts, now);
      }
      const auto c = Clock::now();
      std::vector<RankFlight> flights;
      for (const auto& node : remote) {
        for (const auto& r : node.progress.ranks) flights.push_back({r.rank, summary_flight(r), r.at});
      }
      const auto verdict = match_flight_dumps(flights).text();
      const auto d = Clock::now();
      decode.add(a, b);
      policy.add(b, c);
      match.add(c, d);
      if (verdict.empty() && look == 0) std::fprintf(stderr, "no verdict at %d nodes\n", nodes);
    }
    if (found != static_cast<std::size_t>(looks))
      std::fprintf(stderr, "the policy found %zu hangs in %d looks\n", found, looks);
    std::printf("| %d x %d | %zu | %.0f | %.0f (max %.0f) | %.0f (max %.0f) | %.0f (max %.0f) |\n", nodes, per_node,
                records.empty() ? std::size_t{0} : records.front().size(), static_cast<double>(bytes) / 1024,
                decode.median(), decode.max(), policy.median(), policy.max(), match.median(), match.max());
  }
  return 0;
}
