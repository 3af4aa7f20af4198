#pragma once
// What the benchmark measures, each against a private etcd of its own: 1 and 2, a rendezvous and
// then the running job; 3, a node's death; 4, the coordinator's writer alone.

#include <array>
#include <optional>
#include <string>
#include <vector>

#include "bench/elastic_etcd/agents.hpp"
#include "bench/elastic_etcd/etcd_server.hpp"

namespace rankrun::bench::etcd_bench {

// The command line (see elastic_etcd_bench.cpp).
struct Args {
  std::vector<int> sizes{8, 64, 512, 1024, 2048};
  std::vector<int> lease_sizes{8, 64, 512, 1024, 2048};
  std::vector<int> writer_sizes{512, 2048};
  int repeat = 3;
  double window_s = 12;
  double node_timeout_s = 15;
  double reply_timeout_s = 0;  // 0: NodeLink's, a third of the node timeout (at least 0.3 s)
  int death_runs = 3;
  int death_nodes = 8;
  double death_timeout_s = 3;
  double rdzv_limit_s = 60;        // a rendezvous not complete by then is given up
  double poll_s = 0;               // join_round's poll; 0: NodeLink's (a lease interval)
  bool waiting_keep_alive = true;  // false: as NodeLink before it renewed the lease while waiting
  std::string etcd = "/usr/bin/etcd";
  std::string tmp;
};

// --- 1 and 2: rendezvous, then the running job ---------------------------------------------------

struct RendezvousRow {
  int n = 0;
  double connect_ms = 0;                             // first thread started -> every agent connected
  double grant_ms = 0;                               // every agent granted its lease
  double first_join_ms = 0;                          // release -> the coordinator's watch shows the first join/
  double last_join_ms = 0;                           // ... the last join/
  double close_ms = 0;                               // ... the RoundHost closed the round
  double writer_ms = 0;                              // close -> the watch shows the last member's assign/
  double first_round_ms = 0;                         // release -> the first agent holds its RoundRecord
  double rdzv_ms = 0;                                // release -> the last agent holds its RoundRecord
  double calls_per_node = 0;                         // etcd's gRPC calls, release -> last RoundRecord, / N
  std::array<double, k_methods.size()> by_method{};  // per node
  double etcd_cpu_ms = 0;
  double io_cpu_ms = 0;
  double map_bytes = 0;
  double join_put_ms = 0;     // release -> the last agent's PUT join/ returned
  double assign_seen_ms = 0;  // release -> the last agent's wait for assign/ returned
  double agent_calls = 0;     // LinkStore calls per agent (its lease grant included)
  int lefts = 0;              // join/ keys deleted (a lease lapsed) during the rendezvous
  int failed = 0;             // agents with no usable round
  int lease_failed = 0;       // agents that failed once running (their lease lapsed while they waited)
};

struct LeaseRow {
  int n = 0;
  double window_s = 0;
  double interval_s = 0;
  double http_per_node_s = 0;
  double keepalive = 0, txn = 0, watch = 0, other = 0;  // HTTP requests per node per second
  double connections_per_node_s = 0;
  double bytes_up_per_node_s = 0;
  double bytes_down_per_node_s = 0;
  double grpc_calls_per_node_s = 0;  // etcd's count, the coordinator's share included
  double grpc_in_per_node_s = 0, grpc_out_per_node_s = 0;
  double etcd_cpu_us_per_node_s = 0;
  double io_cpu_us_per_node_s = 0;
  double proxy_cpu_us_per_node_s = 0;
  double etcd_idle_cpu_ms_s = 0;  // etcd's CPU per second with the coordinator alone
  int lost = 0;
};

struct RunResult {
  std::optional<RendezvousRow> rdzv;
  std::optional<LeaseRow> lease;
  std::string error;
};

RunResult run_once(int n, bool with_leases, const Args& args);

// --- 3: a node's death -------------------------------------------------------------------------------

struct DeathRow {
  Death mode = Death::Silent;
  int run = 0;
  double lapsed_ms = -1;   // from the death's reference point to the lease key's deletion in the watch
  double restart_ms = -1;  // ... to the RoundHost's restart hook
  std::string why;
  std::string error;
};

DeathRow run_death(Death mode, int run, const Args& args);

// --- 4: the writer alone ---------------------------------------------------------------------

struct WriterRow {
  int n = 0;
  double total_ms = 0;
  double fsyncs_per_put = 0;
};

WriterRow writer_alone(int n, const Args& args);

}  // namespace rankrun::bench::etcd_bench
