// Elastic rendezvous over etcd (--rdzv-backend=etcd), in one process beside a private etcd: the
// coordinator as rankrun runs it once elected (EtcdCoordinator, then take_over() and feed() into
// a RoundHost and a LeaseWatch, all on one io_context thread, with the coordinator's own
// campaigner and writer threads), and N agents, each one std::thread with its own EtcdClient
// (a LinkStore, as NodeLink makes it) running the real agent code, the steps NodeLink's watcher
// runs: cluster::join_round with the node's etcd lease and the waiting node's store traffic
// (cluster::JoinProgress, once per poll: a keep_alive of the lease once per lease interval, CHECK
// spare/<me>, CHECK + GET rdzv/status), then at once the running node's (cluster::refresh_lease
// and cluster::await_notice).
//
//   rankrun_elastic_etcd_bench [--sizes 8,64,512,1024,2048] [--lease-sizes 8,64,512,1024,2048]
//                              [--repeat 3] [--window 12] [--node-timeout 15] [--rdzv-limit 60]
//                              [--death-runs 3] [--death-nodes 8] [--death-timeout 3]
//                              [--writer-sizes 512,2048] [--reply-timeout 0] [--poll S]
//                              [--no-waiting-keep-alive] [--etcd /usr/bin/etcd] [--tmp DIR]
//
// Every run starts its own etcd (/usr/bin/etcd 3.4) on two free loopback ports with a fresh
// --data-dir under --tmp (default $TMPDIR or /tmp: a real disk, so each write is an fsync), and
// stops it by its pid.
//
// 1. Rendezvous (every size, --repeat times, a size that fails once is not run again; RoundRules
//    min = max = N, last_call 30 s, join_timeout 600 s): every agent connects (its EtcdClient's
//    request connection), then every agent is granted its lease (--node-timeout), then all are
//    released together and call join_round (DELETE assign/<me>, PUT join/<me> with the lease,
//    wait for assign/<me>: a Txn read, then a watch on a second connection; GET assign/<me>, a
//    Txn read of the map's pages). An agent that holds its round starts the running steps at
//    once: PUT round/0/lease/<rank> with its lease, then per lease interval a keep_alive and a
//    wait for stop/0. Measured from the release: the last agent's PUT join/
//    returned; the coordinator's watch showing the first and the last join/; the RoundHost's
//    close; the coordinator's watch showing the last assign/ (its writer's last PUT applied);
//    the first and the last agent holding its RoundRecord; join/ keys deleted by etcd (a lease
//    lapsed) and agents whose first lease PUT then failed. etcd's gRPC calls per node (its
//    /metrics, grpc_server_started_total: one per HTTP request of its JSON gateway, the
//    coordinator's included), etcd's CPU time (/proc/<pid>/stat), the io thread's CPU time, the
//    agents' LinkStore calls. A rendezvous not complete after --rdzv-limit s is given up.
// 2. Running (the first repetition of each --lease-sizes size whose rendezvous worked): the
//    agents run the running node's steps in etcd mode (--node-timeout 15 s: a lease interval of
//    3 s). Each moves, after its next wait, to a new connection through a counting TCP proxy in
//    this process (the traffic of NodeLink's reconnect), which counts the HTTP bytes both ways
//    (payload, no TCP/IP headers), the HTTP requests by path and the TCP connections. Over a
//    window of --window s that starts two intervals later: those per node per second; etcd's
//    own gRPC calls and bytes and its CPU time per node per second (etcd's CPU per second with
//    the coordinator alone, measured for 3 s before the agents start, beside it). The phase
//    ends as a job does: stop/0 is written, every wait returns.
// 3. A node's death (--death-runs times each way, --death-nodes nodes, --death-timeout as
//    --node-timeout): once the round runs, node rank N-1 (a) stops right after a keep_alive
//    returned, without a word (etcd ends its lease TTL = node timeout later), or (b) revokes its
//    lease (what NodeLink::stop() does). Measured: the lease key's deletion in the coordinator's
//    watch and the RoundHost's restart hook, from the end of the node's last keep_alive (a) or
//    from the start of its revoke (b).
// 4. The coordinator's writer alone (--writer-sizes): one EtcdClient with the coordinator's
//    options writes N assign/<instance> answers with set_many (transactions of up to 128 puts),
//    as EtcdCoordinator::writer_main does at a round's close, with nothing else running; etcd's
//    WAL fsyncs per answer from its /metrics.
//
// What-ifs (not what rankrun does): --poll S makes join_round's poll (and so the waiting
// node's status reads and the watch reopenings) S seconds instead of NodeLink's (a lease
// interval, 3 s at the default --node-timeout); --no-waiting-keep-alive leaves the lease alone
// while the node waits, as NodeLink did before 2026-11-23 (a node that waited longer than
// --node-timeout lost its join).
//
// Prints a table per phase, and one "JSON {...}" line per measurement.
//
// Its parts: bench/elastic_etcd/ (etcd_server: the private etcd and its /metrics; counting_proxy;
// coordinator; agents; scenarios: what each of 1 to 4 runs and measures). This file: the command
// line and the tables.

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>
#include <spdlog/spdlog.h>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_cli.hpp"
#include "bench/bench_util.hpp"
#include "bench/elastic_etcd/scenarios.hpp"

namespace {

using rankrun::bench::etcd_bench::Args;
using rankrun::bench::etcd_bench::Death;

// The command line into `args`; an exit code when the program is to stop there (--help, a bad option).
std::optional<int> parse_args(Args& args, int argc, char** argv) {
  using rankrun::bench::at_least;
  using rankrun::bench::seconds;
  CLI::App app{
      "Elastic rendezvous over etcd in one process beside a private etcd: the coordinator as rankrun runs it "
      "and N agents running the agents' steps (docs/benchmarks/elastic-etcd.md).",
      "rankrun_elastic_etcd_bench"};
  app.add_option("--sizes", args.sizes, "N of 1, the rendezvous, comma-separated")
      ->delimiter(',')
      ->check(at_least(1))
      ->capture_default_str();
  app.add_option("--lease-sizes", args.lease_sizes, "N whose first rendezvous goes on to 2, the running job")
      ->delimiter(',')
      ->check(at_least(0))
      ->capture_default_str();
  app.add_option("--repeat", args.repeat, "rendezvous per size (median)")->check(at_least(0))->capture_default_str();
  app.add_option("--window", args.window_s, "seconds counted in 2")->check(seconds())->capture_default_str();
  app.add_option("--node-timeout", args.node_timeout_s, "the nodes' --node-timeout, s (lease interval: a fifth)")
      ->check(seconds())
      ->capture_default_str();
  app.add_option("--rdzv-limit", args.rdzv_limit_s, "seconds before a rendezvous is given up")
      ->check(seconds())
      ->capture_default_str();
  app.add_option("--death-runs", args.death_runs, "runs of 3, each way")->check(at_least(0))->capture_default_str();
  app.add_option("--death-nodes", args.death_nodes, "nodes of 3")->check(at_least(1))->capture_default_str();
  app.add_option("--death-timeout", args.death_timeout_s, "the nodes' --node-timeout in 3, s")
      ->check(seconds())
      ->capture_default_str();
  app.add_option("--writer-sizes", args.writer_sizes, "N of 4, the writer alone (0: none)")
      ->delimiter(',')
      ->check(at_least(0))
      ->capture_default_str();
  app.add_option("--reply-timeout", args.reply_timeout_s, "the agents' reply timeout, s (0: NodeLink's)")
      ->check(seconds(true))
      ->capture_default_str();
  app.add_option("--poll", args.poll_s, "what-if: join_round's poll, s (0: NodeLink's, a lease interval)")
      ->check(seconds(true))
      ->capture_default_str();
  bool no_keep_alive = false;
  app.add_flag("--no-waiting-keep-alive", no_keep_alive, "what-if: no keep_alive of the lease while a node waits");
  app.add_option("--etcd", args.etcd, "etcd's executable")->capture_default_str();
  app.add_option("--tmp", args.tmp, "where the data directories go")->capture_default_str();
  const auto rc = rankrun::bench::parse_command_line(app, argc, argv);
  args.waiting_keep_alive = !no_keep_alive;
  return rc;
}

const char* death_name(Death d) { return d == Death::Silent ? "silent" : "revoke"; }

}  // namespace

int main(int argc, char** argv) {
  using namespace rankrun::bench::etcd_bench;
  using rankrun::bench::median;
  Args args;
  if (const char* t = std::getenv("TMPDIR"); t && *t) args.tmp = t;
  if (args.tmp.empty()) args.tmp = "/tmp";
  if (const auto rc = parse_args(args, argc, argv)) return *rc;
  if (::access(args.etcd.c_str(), X_OK) != 0) {
    std::fprintf(stderr, "no etcd at %s (--etcd)\n", args.etcd.c_str());
    return 2;
  }
  spdlog::set_level(spdlog::level::warn);
  // Two connections per waiting agent (its requests and its watch) in this process, as many at
  // etcd (which inherits the limit), plus a few.
  const rlimit lim = rankrun::bench::raise_nofile();
  std::printf("RLIMIT_NOFILE %llu; %u CPUs; etcd %s; data directories under %s\n",
              static_cast<unsigned long long>(lim.rlim_cur), std::thread::hardware_concurrency(), args.etcd.c_str(),
              args.tmp.c_str());
  std::fflush(stdout);

  std::vector<RendezvousRow> rdzv_rows;
  std::vector<LeaseRow> lease_rows;
  std::vector<std::string> errors;
  for (int n : args.sizes) {
    if (static_cast<rlim_t>(4 * n + 64) > lim.rlim_cur) {
      errors.push_back("N=" + std::to_string(n) + ": needs " + std::to_string(4 * n + 64) +
                       " descriptors, RLIMIT_NOFILE is " + std::to_string(lim.rlim_cur));
      continue;
    }
    const bool want_leases = std::find(args.lease_sizes.begin(), args.lease_sizes.end(), n) != args.lease_sizes.end();
    std::vector<RendezvousRow> reps;
    for (int r = 0; r < args.repeat; ++r) {
      RunResult res;
      try {
        res = run_once(n, want_leases && r == 0, args);
      } catch (const std::exception& e) {
        res.error = e.what();
      }
      if (!res.error.empty()) {
        errors.push_back("N=" + std::to_string(n) + " run " + std::to_string(r + 1) + ": " + res.error);
        std::printf("JSON {\"phase\": \"error\", \"n\": %d, \"run\": %d}\nerror: %s\n", n, r + 1,
                    errors.back().c_str());
      }
      const bool failed = !res.error.empty();
      if (res.rdzv) {
        const auto& x = *res.rdzv;
        std::printf(
            "JSON {\"phase\": \"rendezvous\", \"n\": %d, \"run\": %d, \"connect_ms\": %.1f, \"grant_ms\": %.1f, "
            "\"first_join_ms\": %.1f, \"last_join_ms\": %.1f, \"close_ms\": %.1f, \"writer_ms\": %.1f, \"first_round_ms\": %.1f, "
            "\"rdzv_ms\": %.1f, \"calls_per_node\": %.2f, \"range\": %.2f, \"txn\": %.2f, \"put\": %.2f, \"delete\": %.2f, "
            "\"watch\": %.2f, \"keepalive\": %.2f, \"etcd_cpu_ms\": %.0f, \"io_cpu_ms\": %.1f, \"map_bytes\": %.0f, "
            "\"join_put_ms\": %.1f, \"assign_seen_ms\": %.1f, \"agent_calls\": %.2f, \"lefts\": %d, \"failed\": %d, "
            "\"lease_failed\": %d}\n",
            x.n, r + 1, x.connect_ms, x.grant_ms, x.first_join_ms, x.last_join_ms, x.close_ms, x.writer_ms,
            x.first_round_ms, x.rdzv_ms, x.calls_per_node, x.by_method[0], x.by_method[1], x.by_method[2],
            x.by_method[3], x.by_method[4], x.by_method[5], x.etcd_cpu_ms, x.io_cpu_ms, x.map_bytes, x.join_put_ms,
            x.assign_seen_ms, x.agent_calls, x.lefts, x.failed, x.lease_failed);
        reps.push_back(x);
      }
      if (res.lease) {
        const auto& x = *res.lease;
        std::printf(
            "JSON {\"phase\": \"running\", \"n\": %d, \"window_s\": %.1f, \"interval_s\": %.1f, \"http_per_node_s\": %.4f, "
            "\"keepalive\": %.4f, \"txn\": %.4f, \"watch\": %.4f, \"other\": %.4f, \"connections_per_node_s\": %.4f, "
            "\"bytes_up_per_node_s\": %.1f, \"bytes_down_per_node_s\": %.1f, \"grpc_calls_per_node_s\": %.4f, "
            "\"grpc_in_per_node_s\": %.1f, \"grpc_out_per_node_s\": %.1f, \"etcd_cpu_us_per_node_s\": %.1f, "
            "\"io_cpu_us_per_node_s\": %.2f, \"proxy_cpu_us_per_node_s\": %.1f, \"etcd_idle_cpu_ms_s\": %.1f, \"lost\": %d}\n",
            x.n, x.window_s, x.interval_s, x.http_per_node_s, x.keepalive, x.txn, x.watch, x.other,
            x.connections_per_node_s, x.bytes_up_per_node_s, x.bytes_down_per_node_s, x.grpc_calls_per_node_s,
            x.grpc_in_per_node_s, x.grpc_out_per_node_s, x.etcd_cpu_us_per_node_s, x.io_cpu_us_per_node_s,
            x.proxy_cpu_us_per_node_s, x.etcd_idle_cpu_ms_s, x.lost);
        lease_rows.push_back(x);
      }
      std::fflush(stdout);
      if (failed) break;  // a size that failed once is not run again
    }
    if (!reps.empty()) {
      RendezvousRow m;
      m.n = n;
      const auto med = [&](double RendezvousRow::*field) {
        std::vector<double> v;
        for (const auto& x : reps) v.push_back(x.*field);
        return median(v);
      };
      m.connect_ms = med(&RendezvousRow::connect_ms);
      m.grant_ms = med(&RendezvousRow::grant_ms);
      m.first_join_ms = med(&RendezvousRow::first_join_ms);
      m.last_join_ms = med(&RendezvousRow::last_join_ms);
      m.close_ms = med(&RendezvousRow::close_ms);
      m.writer_ms = med(&RendezvousRow::writer_ms);
      m.first_round_ms = med(&RendezvousRow::first_round_ms);
      m.rdzv_ms = med(&RendezvousRow::rdzv_ms);
      m.calls_per_node = med(&RendezvousRow::calls_per_node);
      for (std::size_t i = 0; i < k_methods.size(); ++i) {
        std::vector<double> v;
        for (const auto& x : reps) v.push_back(x.by_method[i]);
        m.by_method[i] = median(v);
      }
      m.etcd_cpu_ms = med(&RendezvousRow::etcd_cpu_ms);
      m.io_cpu_ms = med(&RendezvousRow::io_cpu_ms);
      m.map_bytes = med(&RendezvousRow::map_bytes);
      m.join_put_ms = med(&RendezvousRow::join_put_ms);
      m.assign_seen_ms = med(&RendezvousRow::assign_seen_ms);
      m.agent_calls = med(&RendezvousRow::agent_calls);
      for (const auto& x : reps) {
        m.lefts = std::max(m.lefts, x.lefts);
        m.failed = std::max(m.failed, x.failed);
        m.lease_failed = std::max(m.lease_failed, x.lease_failed);
      }
      rdzv_rows.push_back(m);
    }
  }

  std::vector<DeathRow> deaths;
  for (const Death mode : {Death::Silent, Death::Revoke}) {
    for (int r = 0; r < args.death_runs; ++r) {
      DeathRow x;
      try {
        x = run_death(mode, r + 1, args);
      } catch (const std::exception& e) {
        x.mode = mode;
        x.run = r + 1;
        x.error = e.what();
      }
      if (!x.error.empty())
        errors.push_back(std::string("death ") + death_name(mode) + " run " + std::to_string(r + 1) + ": " + x.error);
      std::printf(
          "JSON {\"phase\": \"death\", \"mode\": \"%s\", \"run\": %d, \"lapsed_ms\": %.1f, \"restart_ms\": %.1f}\n",
          death_name(mode), r + 1, x.lapsed_ms, x.restart_ms);
      std::fflush(stdout);
      deaths.push_back(x);
    }
  }

  std::vector<WriterRow> writers;
  for (int n : args.writer_sizes) {
    if (n <= 0) continue;
    try {
      const auto x = writer_alone(n, args);
      std::printf("JSON {\"phase\": \"writer\", \"n\": %d, \"total_ms\": %.1f, \"fsyncs_per_put\": %.3f}\n", x.n,
                  x.total_ms, x.fsyncs_per_put);
      writers.push_back(x);
    } catch (const std::exception& e) {
      errors.push_back("writer N=" + std::to_string(n) + ": " + e.what());
    }
    std::fflush(stdout);
  }

  std::printf("\nRendezvous over etcd (min = max = N; median of %d; ms from the release)\n\n", args.repeat);
  std::printf(
      "| N | connect | leases granted | last join PUT returned | coordinator sees first join | ... last join | round "
      "closed | writer: close -> last assign seen | first agent holds its round | last agent holds its round | joins "
      "lapsed / agents failed on their lease |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const auto& x : rdzv_rows) {
    std::printf("| %d | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f%s | %d / %d |\n", x.n,
                x.connect_ms, x.grant_ms, x.join_put_ms, x.first_join_ms, x.last_join_ms, x.close_ms, x.writer_ms,
                x.first_round_ms, x.rdzv_ms, x.failed ? " (agents without a round)" : "", x.lefts, x.lease_failed);
  }
  std::printf("\nThe same rendezvous: CPU (ms), calls, the round's map\n\n");
  std::printf("| N | etcd CPU | io thread CPU | LinkStore calls / agent | map bytes |\n|---|---|---|---|---|\n");
  for (const auto& x : rdzv_rows) {
    std::printf("| %d | %.0f | %.1f | %.2f | %.0f |\n", x.n, x.etcd_cpu_ms, x.io_cpu_ms, x.agent_calls, x.map_bytes);
  }
  std::printf("\netcd's gRPC calls per node during the rendezvous, by method (coordinator's included)\n\n");
  std::printf(
      "| N | Range | Txn | Put | DeleteRange | Watch | LeaseKeepAlive | all |\n|---|---|---|---|---|---|---|---|\n");
  for (const auto& x : rdzv_rows) {
    std::printf("| %d | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |\n", x.n, x.by_method[0], x.by_method[1],
                x.by_method[2], x.by_method[3], x.by_method[4], x.by_method[5], x.calls_per_node);
  }
  if (!lease_rows.empty()) {
    std::printf("\nRunning (node_timeout %.0f s, lease interval %.1f s, window %.0f s; per node per second)\n\n",
                args.node_timeout_s, lease_rows.front().interval_s, args.window_s);
    std::printf(
        "| N | HTTP requests | keepalive | txn | watch | other | TCP connections | bytes to etcd | bytes back | etcd gRPC "
        "calls | etcd gRPC bytes in / out | etcd CPU µs (idle etcd: ms/s) | io thread CPU µs | proxy CPU µs | lost |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (const auto& x : lease_rows) {
      std::printf(
          "| %d | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.1f | %.1f | %.3f | %.1f / %.1f | %.1f (%.1f) | %.2f | %.1f | %d |\n",
          x.n, x.http_per_node_s, x.keepalive, x.txn, x.watch, x.other, x.connections_per_node_s, x.bytes_up_per_node_s,
          x.bytes_down_per_node_s, x.grpc_calls_per_node_s, x.grpc_in_per_node_s, x.grpc_out_per_node_s,
          x.etcd_cpu_us_per_node_s, x.etcd_idle_cpu_ms_s, x.io_cpu_us_per_node_s, x.proxy_cpu_us_per_node_s, x.lost);
    }
  }
  if (!deaths.empty()) {
    std::printf(
        "\nA node's death, %d nodes, node_timeout %.0f s (ms; silent: from the end of its last keep_alive; revoke: "
        "from the start of its revoke)\n\n",
        args.death_nodes, args.death_timeout_s);
    std::printf("| how | run | lease key gone (watch) | restart decision | why |\n|---|---|---|---|---|\n");
    for (const auto& x : deaths) {
      std::printf("| %s | %d | %.1f | %.1f | %s |\n", death_name(x.mode), x.run, x.lapsed_ms, x.restart_ms,
                  x.error.empty() ? x.why.c_str() : x.error.c_str());
    }
  }
  if (!writers.empty()) {
    std::printf("\nThe coordinator's writer alone: N assign/ answers with set_many on one connection\n\n");
    std::printf("| N | total ms | per PUT ms | WAL fsyncs per PUT |\n|---|---|---|---|\n");
    for (const auto& x : writers) {
      std::printf("| %d | %.1f | %.3f | %.2f |\n", x.n, x.total_ms, x.total_ms / x.n, x.fsyncs_per_put);
    }
  }
  for (const auto& e : errors) std::printf("error: %s\n", e.c_str());
  return errors.empty() ? 0 : 1;
}
