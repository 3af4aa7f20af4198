// Elastic (dynamic) rendezvous benchmark, in one process: the store host's side as rankrun runs
// it (a StoreServer on 127.0.0.1:0 with a RoundHost and a LeaseWatch on one io_context thread)
// and N agents, each one std::thread with its own StoreClient in the agents' key space running
// the real agent code: cluster::join_round with the waiting node's store traffic
// (cluster::JoinProgress: CHECK spare/<me>, CHECK + GET rdzv/status every second), then
// cluster::watch_interval, the steps NodeLink's watcher runs.
//
//   rankrun_elastic_bench [--sizes 8,64,512,2048] [--lease-sizes 8,64,512,2048]
//                         [--keeper-sizes 8,64,512,2048,4096] [--repeat 3] [--window 12]
//                         [--node-timeout 15]
//
// 1. Rendezvous (every size, --repeat times, a fresh server each time; RoundRules min = max = N,
//    last_call 30 s, join_timeout 600 s): every agent connects first (VALIDATE, the key-space SET,
//    PING), then all are released together and call join_round. Measured: from the first
//    join/<instance> SET the server sees to the last agent holding its RoundRecord; the
//    RoundHost's close (every join taken, N assign keys written) on the way; the store requests
//    per node; the io thread's CPU time; the size of the round's map (round/0/map/<p>, pages
//    under cluster::k_max_record / 2), which every agent reads whole.
// 2. Running (the first repetition of each --lease-sizes size): every agent does what a node
//    does while its workers run, with --node-timeout 15 s (cluster::watch_interval): SET
//    round/0/lease/<rank>, then WAIT for stop/0 for lease_interval() (3 s; the client sends
//    CANCEL_WAIT when it times out), again and again. Over a window of --window seconds (a
//    whole number of lease intervals, so every node refreshes the same number of times in it),
//    counted at the server with a StoreObserver: requests per node per second; counted by the
//    agents from the wire format (wire.hpp's encoder, the bytes each request and reply carries,
//    no TCP/IP headers): bytes per node per second; and the io thread's CPU time per node per
//    second. The phase ends as a job does: the host sets stop/0, every WAIT returns (and each
//    agent reads it).
// 3. The store host's pure share, on one thread (--keeper-sizes): N joins into the RoundKeeper
//    with the waiting line built once (RoundHost rebuilds it at most once a second), and the
//    map's pages encoded at the close; one agent's decode_pages(). Thread CPU time, median of 5.
//
// Prints a table per phase, and one "JSON {...}" line per measurement (bench/elastic_bench.py
// reads those).

#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <array>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "bench/bench_cli.hpp"
#include "bench/bench_util.hpp"
#include "bench/on_io.hpp"
#include "launcher/cluster/attempt_steps.hpp"
#include "launcher/cluster/elastic_join.hpp"
#include "launcher/cluster/lease_watch.hpp"
#include "launcher/cluster/records.hpp"
#include "launcher/cluster/round_host.hpp"
#include "launcher/cluster/rounds.hpp"
#include "rendezvous/store_client.hpp"
#include "rendezvous/store_server.hpp"
#include "rendezvous/wire.hpp"

namespace rdzv = rankrun::rendezvous;
namespace cluster = rankrun::launcher::cluster;
using Clock = std::chrono::steady_clock;
using rankrun::bench::median;
using rankrun::bench::ms_between;
using rankrun::bench::on_io;
using rankrun::bench::thread_cpu_s;
using std::chrono::milliseconds;

namespace {

struct Args {
  std::vector<int> sizes{8, 64, 512, 2048};
  std::vector<int> lease_sizes{8, 64, 512, 2048};
  std::vector<int> keeper_sizes{8, 64, 512, 2048, 4096};
  int repeat = 3;
  double window_s = 12;
  double node_timeout_s = 15;
};

double self_cpu_ms() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

/// Bytes of `request` on the wire (the generation StoreClient speaks to rankrun's store).
std::size_t frame_bytes(const rdzv::Request& request) {
  std::string out;
  rdzv::encode_request(request, rdzv::Generation::V2_2, out);
  return out.size();
}

// Every request of the agents' connections, by op (io thread only).
struct Counter : rdzv::StoreObserver {
  std::array<std::uint64_t, 32> by_op{};
  std::uint64_t total = 0;
  std::optional<Clock::time_point> first_join, last_join;
  void on_request(std::uint64_t, rdzv::Op op, std::string_view key) override {
    ++by_op[static_cast<std::size_t>(op)];
    ++total;
    if (op == rdzv::Op::Set && key.rfind("join/", 0) == 0) {
      last_join = Clock::now();
      if (!first_join) first_join = last_join;
    }
  }
};

cluster::NodeRecord bench_node(int i) {
  return cluster::NodeRecord{-1, "10.0." + std::to_string(i / 250) + "." + std::to_string(i % 250), 8, "bench",
                             "a" + std::to_string(i)};
}

// The store host's pure share of a rendezvous, on one thread: N joins into the RoundKeeper, the
// waiting line built once (RoundHost::arm() rebuilds it at most once a second), and the round's
// map pages encoded at the close; then one agent's decode_pages() of that map.
struct KeeperRow {
  int n = 0;
  double joins_ms = 0;
  double decode_ms = 0;
  std::size_t map_bytes = 0;
  std::size_t status_bytes = 0;  // the longest waiting line
};

KeeperRow keeper_alone(int n) {
  cluster::RoundRules rules;
  rules.min_nodes = n;
  rules.max_nodes = n;
  const auto now = Clock::now();
  cluster::RoundKeeper keeper(rules, now);
  KeeperRow row;
  row.n = n;
  std::vector<std::string> pages;
  const double t0 = self_cpu_ms();
  for (int i = 0; i < n; ++i) {
    const auto step = keeper.join(bench_node(i), now);
    if (i == n - 2) row.status_bytes = keeper.status(now).size();
    if (step.closed) pages = cluster::encode_pages(*step.closed);
  }
  row.joins_ms = self_cpu_ms() - t0;
  for (const auto& p : pages) row.map_bytes += p.size();
  const double t1 = self_cpu_ms();
  const auto decoded = cluster::decode_pages(pages, 0, n);
  row.decode_ms = self_cpu_ms() - t1;
  if (!decoded) row.decode_ms = -row.decode_ms;  // unreadable
  return row;
}

struct AgentResult {
  Clock::time_point done{};
  bool ok = false;
  int node_rank = -1;
  std::string error;
  std::uint64_t window_bytes_out = 0;
  std::uint64_t window_bytes_in = 0;
};

// What the main thread and the agents share.
struct Control {
  std::mutex mutex;
  std::condition_variable main_cv;    // the main thread waits here
  std::condition_variable agents_cv;  // the agents wait here
  int connected = 0;
  int joined = 0;
  int exited = 0;
  bool go = false;
  bool abort = false;
  int phase2 = 0;  // 0: wait; 1: run the leases; 2: quit
  Clock::time_point window_start{}, window_end{};
};

struct RendezvousRow {
  int n = 0;
  double connect_ms = 0;  // first thread created -> every agent connected
  double joins_ms = 0;    // first join SET -> last join SET (at the server)
  double close_ms = 0;    // first join SET -> RoundHost closed the round
  double rdzv_ms = 0;     // first join SET -> last agent holds its RoundRecord
  double release_ms = 0;  // the agents released -> last agent holds its RoundRecord
  double requests_per_node = 0;
  double io_cpu_ms = 0;  // io thread CPU from the release to the last RoundRecord
  double map_bytes = 0;  // round/0/map, which every agent reads
  int failed = 0;        // agents whose answer was no usable round
};

struct LeaseRow {
  int n = 0;
  double window_s = 0;
  double interval_s = 0;
  double requests_per_node_s = 0;
  double sets = 0, waits = 0, cancels = 0, others = 0;  // per node per second
  double bytes_out_per_node_s = 0;
  double bytes_in_per_node_s = 0;
  double io_cpu_us_per_node_s = 0;
  int lost = 0;
};

struct RunResult {
  std::optional<RendezvousRow> rdzv;
  std::optional<LeaseRow> lease;
  std::string error;
};

void agent_main(int i, int n, std::uint16_t port, Control& ctl, AgentResult& out, milliseconds interval) {
  int counted = 0;  // 1: in ctl.connected, 2: in ctl.joined too
  try {
    rdzv::ClientOptions options;
    options.key_space = cluster::k_agents_key_space;
    options.connect_timeout = std::chrono::seconds(60);
    options.timeout = std::chrono::seconds(600);
    auto owned = std::make_unique<rdzv::StoreClient>("127.0.0.1", port, options);
    owned->ping();
    const auto store = cluster::wrap(std::move(owned));
    auto& client = *store;
    {
      std::unique_lock lock(ctl.mutex);
      ++ctl.connected;
      counted = 1;
      ctl.main_cv.notify_one();
      ctl.agents_cv.wait(lock, [&] { return ctl.go || ctl.abort; });
      if (ctl.abort) return;
    }
    const cluster::NodeRecord me = bench_node(i);
    // The waiting node's store traffic, as NodeLink's (its printing left out); no lease.
    cluster::JoinProgress progress(me.instance, 0, interval);
    const auto answer = cluster::join_round(
        client, me,
        [&](cluster::LinkStore& c) {
          progress.step(c, [](const std::string&) {});
          return true;
        },
        progress.poll());
    out.done = Clock::now();
    if (answer.kind == cluster::JoinAnswer::Kind::Round && static_cast<int>(answer.round.members.size()) == n) {
      out.node_rank = answer.node_rank;
      out.ok = out.node_rank >= 0 && answer.round.members[static_cast<std::size_t>(out.node_rank)].host == me.host;
    }
    if (!out.ok)
      out.error = "join answer: kind " + std::to_string(static_cast<int>(answer.kind)) + " " + answer.message;
    Clock::time_point window_start, window_end;
    {
      std::unique_lock lock(ctl.mutex);
      ++ctl.joined;
      counted = 2;
      ctl.main_cv.notify_one();
      ctl.agents_cv.wait(lock, [&] { return ctl.phase2 != 0; });
      if (ctl.phase2 == 2 || !out.ok) return;
      window_start = ctl.window_start;
      window_end = ctl.window_end;
    }
    // A running node: refresh the lease, wait for the stop notice a lease interval at a time.
    cluster::NodeLease lease{cluster::lease_prefix(0) + std::to_string(out.node_rank)};
    const int attempt = cluster::attempt_id(0, 0);
    rdzv::Request wait_request;
    wait_request.op = rdzv::Op::Wait;
    wait_request.keys = {cluster::stop_key(attempt)};
    const std::size_t wait_bytes = frame_bytes(wait_request);
    for (;;) {
      const auto t = Clock::now();
      const bool in_window = t >= window_start && t < window_end;
      const bool stopped = cluster::watch_interval(client, lease, attempt, interval).published;
      // The SET it sent: the lease key, the number of refreshes.
      rdzv::Request set_request;
      set_request.op = rdzv::Op::Set;
      set_request.keys = {lease.key};
      set_request.values = {std::to_string(lease.beats)};
      if (in_window) {
        out.window_bytes_out += frame_bytes(set_request) + wait_bytes + (stopped ? 0 : 1);  // + CANCEL_WAIT
        out.window_bytes_in += 1;  // STOP_WAITING, or WAIT_CANCELED
      }
      if (stopped) break;
    }
  } catch (const std::exception& e) {
    out.error = e.what();
    out.ok = false;
    // Counted as done, so that the main thread does not wait for this agent.
    std::lock_guard lock(ctl.mutex);
    if (counted < 1) ++ctl.connected;
    if (counted < 2) ++ctl.joined;
    if (out.done == Clock::time_point{}) out.done = Clock::now();
    ctl.main_cv.notify_one();
  }
}

RunResult run_once(int n, bool with_leases, const Args& args) {
  RunResult result;
  boost::asio::io_context io;
  auto guard = boost::asio::make_work_guard(io);
  rdzv::ServerOptions server_options;
  server_options.bind_address = "127.0.0.1";
  server_options.port = 0;
  // Every agent here comes from 127.0.0.1, as nodes behind NAT do: past the default of 1024
  // connections per address the store would refuse them.
  server_options.limits.max_connections_per_peer = server_options.limits.max_connections;
  rdzv::StoreServer server(io, server_options);
  Counter counter;
  const auto node_timeout = milliseconds(static_cast<long long>(args.node_timeout_s * 1000));
  const auto interval = cluster::lease_interval(node_timeout);
  int lost = 0;
  cluster::LeaseWatch leases(io, n, node_timeout,
                             cluster::LeaseWatch::Hooks{[&lost](int) { ++lost; }, nullptr, nullptr});
  std::optional<Clock::time_point> closed_at;
  cluster::RoundRules rules;
  rules.min_nodes = n;
  rules.max_nodes = n;
  rules.last_call = std::chrono::seconds(30);
  rules.join_timeout = std::chrono::seconds(600);
  const auto keys = cluster::store_keys(server);
  cluster::RoundHost host(io, *keys, rules, cluster::RoundHost::Hooks{nullptr, [&](const cluster::RoundRecord& round) {
                                                                        closed_at = Clock::now();
                                                                        leases.start_round(
                                                                            static_cast<int>(round.members.size()),
                                                                            cluster::lease_prefix(round.round));
                                                                      }});
  server.add_observer(&counter);
  server.add_observer(&leases);
  server.add_observer(&host);
  std::thread io_thread([&io] { io.run(); });

  Control ctl;
  std::vector<AgentResult> agents(static_cast<std::size_t>(n));
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(n));
  const auto t_spawn = Clock::now();
  try {
    for (int i = 0; i < n; ++i) {
      threads.emplace_back(agent_main, i, n, server.port(), std::ref(ctl),
                           std::ref(agents[static_cast<std::size_t>(i)]), interval);
    }
  } catch (const std::system_error& e) {
    result.error = "could start only " + std::to_string(threads.size()) + " of " + std::to_string(n) +
                   " agent threads: " + e.what();
  }
  bool ok = result.error.empty();
  Clock::time_point t_connected{}, t_release{};
  double cpu_release = 0;
  if (ok) {
    std::unique_lock lock(ctl.mutex);
    // A thread that failed to connect never counts itself: give up after the client's own timeout.
    if (!ctl.main_cv.wait_for(lock, std::chrono::seconds(90), [&] { return ctl.connected == n; })) {
      result.error = "only " + std::to_string(ctl.connected) + " of " + std::to_string(n) + " agents connected";
      ok = false;
    }
  }
  {
    std::lock_guard lock(ctl.mutex);
    t_connected = Clock::now();
    if (ok) {
      cpu_release = thread_cpu_s(io_thread);
      t_release = Clock::now();
      ctl.go = true;
    } else {
      ctl.abort = true;
      ctl.phase2 = 2;
    }
  }
  ctl.agents_cv.notify_all();
  if (ok) {
    std::unique_lock lock(ctl.mutex);
    if (!ctl.main_cv.wait_for(lock, std::chrono::seconds(660), [&] { return ctl.joined == n; })) {
      result.error = "only " + std::to_string(ctl.joined) + " of " + std::to_string(n) + " agents got an answer";
      ok = false;
    }
  }
  const double cpu_joined = thread_cpu_s(io_thread);
  if (ok) {
    Clock::time_point last{};
    int failed = 0;
    std::string first_error;
    for (const auto& a : agents) {
      last = std::max(last, a.done);
      if (!a.ok) {
        ++failed;
        if (first_error.empty()) first_error = a.error;
      }
    }
    if (failed > 0) {
      result.error = std::to_string(failed) + " agents got no round: " + first_error;
      ok = false;
    }
    {
      // Timed also when the agents got an answer they could not use (the row says so).
      const auto [first_join, last_join, closed, requests, map_bytes] = on_io(io, [&] {
        std::size_t bytes = 0;
        if (const auto space = server.find_key_space(cluster::k_agents_key_space)) {
          for (int p = 0;; ++p) {
            const auto page = server.state(*space).value(cluster::round_map_key(0, p));
            if (!page) break;
            bytes += page->size();
          }
        }
        return std::make_tuple(counter.first_join, counter.last_join, closed_at, counter.total, bytes);
      });
      RendezvousRow row;
      row.n = n;
      row.connect_ms = ms_between(t_spawn, t_connected);
      row.joins_ms = first_join && last_join ? ms_between(*first_join, *last_join) : -1;
      row.map_bytes = static_cast<double>(map_bytes);
      row.close_ms = first_join && closed ? ms_between(*first_join, *closed) : -1;
      row.rdzv_ms = first_join ? ms_between(*first_join, last) : -1;
      row.release_ms = ms_between(t_release, last);
      row.requests_per_node = static_cast<double>(requests) / n;
      row.io_cpu_ms = (cpu_joined - cpu_release) * 1000;
      row.failed = failed;
      result.rdzv = row;
    }
  }

  if (ok && with_leases) {
    // Two lease intervals to settle, then the window.
    const auto window = milliseconds(static_cast<long long>(args.window_s * 1000));
    {
      std::lock_guard lock(ctl.mutex);
      ctl.window_start = Clock::now() + 2 * interval;
      ctl.window_end = ctl.window_start + window;
      ctl.phase2 = 1;
    }
    ctl.agents_cv.notify_all();
    std::this_thread::sleep_until(ctl.window_start);
    const auto [c0, cpu0] = on_io(io, [&] { return std::make_pair(counter.by_op, thread_cpu_s(io_thread)); });
    std::this_thread::sleep_until(ctl.window_end);
    const auto [c1, cpu1] = on_io(io, [&] { return std::make_pair(counter.by_op, thread_cpu_s(io_thread)); });
    // The job ends: the stop notice wakes every node's WAIT.
    on_io(io, [&] {
      if (const auto space = server.find_key_space(cluster::k_agents_key_space)) {
        server.set(*space, cluster::stop_key(cluster::attempt_id(0, 0)), "bench over");
      }
      return 0;
    });
    for (auto& t : threads) t.join();
    threads.clear();
    const auto d = [&](rdzv::Op op) {
      const auto k = static_cast<std::size_t>(op);
      return static_cast<double>(c1[k] - c0[k]);
    };
    double total = 0;
    for (std::size_t k = 0; k < c0.size(); ++k) total += static_cast<double>(c1[k] - c0[k]);
    const double per = 1.0 / (n * args.window_s);
    LeaseRow row;
    row.n = n;
    row.window_s = args.window_s;
    row.interval_s = std::chrono::duration<double>(interval).count();
    row.requests_per_node_s = total * per;
    row.sets = d(rdzv::Op::Set) * per;
    row.waits = d(rdzv::Op::Wait) * per;
    row.cancels = d(rdzv::Op::CancelWait) * per;
    row.others = (total - d(rdzv::Op::Set) - d(rdzv::Op::Wait) - d(rdzv::Op::CancelWait)) * per;
    std::uint64_t out_bytes = 0, in_bytes = 0;
    for (const auto& a : agents) {
      out_bytes += a.window_bytes_out;
      in_bytes += a.window_bytes_in;
      if (!a.error.empty() && result.error.empty()) result.error = "an agent failed while running: " + a.error;
    }
    row.bytes_out_per_node_s = static_cast<double>(out_bytes) * per;
    row.bytes_in_per_node_s = static_cast<double>(in_bytes) * per;
    row.io_cpu_us_per_node_s = (cpu1 - cpu0) * 1e6 * per;
    row.lost = on_io(io, [&] { return lost; });
    result.lease = row;
  } else {
    {
      std::lock_guard lock(ctl.mutex);
      ctl.abort = true;
      ctl.phase2 = 2;
    }
    ctl.agents_cv.notify_all();
  }
  for (auto& t : threads) t.join();
  on_io(io, [&] {
    host.stop();
    leases.stop();
    server.remove_observer(&host);
    server.remove_observer(&leases);
    server.remove_observer(&counter);
    server.stop();
    return 0;
  });
  guard.reset();
  io.stop();
  io_thread.join();
  return result;
}

// The command line into `args`; an exit code when the program is to stop there (--help, a bad option).
std::optional<int> parse_args(Args& args, int argc, char** argv) {
  using rankrun::bench::at_least;
  using rankrun::bench::seconds;
  CLI::App app{
      "Elastic rendezvous in one process: the store host's RoundHost and N agents running cluster::join_round, "
      "then the running nodes' lease traffic, then the store host's share alone (docs/benchmarks/elastic.md).",
      "rankrun_elastic_bench"};
  app.add_option("--sizes", args.sizes, "N of the rendezvous, comma-separated")
      ->delimiter(',')
      ->check(at_least(1))
      ->capture_default_str();
  app.add_option("--lease-sizes", args.lease_sizes, "N whose first rendezvous goes on to the running phase")
      ->delimiter(',')
      ->check(at_least(0))
      ->capture_default_str();
  app.add_option("--keeper-sizes", args.keeper_sizes, "N of the store host's share alone")
      ->delimiter(',')
      ->check(at_least(1))
      ->capture_default_str();
  app.add_option("--repeat", args.repeat, "rendezvous per size (median)")->check(at_least(0))->capture_default_str();
  app.add_option("--window", args.window_s, "seconds counted in the running phase")
      ->check(seconds())
      ->capture_default_str();
  app.add_option("--node-timeout", args.node_timeout_s, "the nodes' --node-timeout, s (lease interval: a fifth)")
      ->check(seconds())
      ->capture_default_str();
  return rankrun::bench::parse_command_line(app, argc, argv);
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  if (const auto rc = parse_args(args, argc, argv)) return *rc;
  // Two descriptors per agent (its client and the server's end), plus a few.
  const rlimit lim = rankrun::bench::raise_nofile();
  std::printf("RLIMIT_NOFILE %llu; %u CPUs\n", static_cast<unsigned long long>(lim.rlim_cur),
              std::thread::hardware_concurrency());
  std::fflush(stdout);

  std::vector<int> sizes = args.sizes;
  std::vector<RendezvousRow> rdzv_rows;
  std::vector<LeaseRow> lease_rows;
  std::vector<std::string> errors;
  for (int n : sizes) {
    if (static_cast<rlim_t>(2 * n + 64) > lim.rlim_cur) {
      errors.push_back("N=" + std::to_string(n) + ": needs " + std::to_string(2 * n + 64) +
                       " descriptors, RLIMIT_NOFILE is " + std::to_string(lim.rlim_cur));
      continue;
    }
    const bool want_leases = std::find(args.lease_sizes.begin(), args.lease_sizes.end(), n) != args.lease_sizes.end();
    std::vector<RendezvousRow> reps;
    for (int r = 0; r < args.repeat; ++r) {
      auto res = run_once(n, want_leases && r == 0, args);
      if (!res.error.empty()) {
        errors.push_back("N=" + std::to_string(n) + " run " + std::to_string(r + 1) + ": " + res.error);
        std::printf("JSON {\"phase\": \"error\", \"n\": %d, \"run\": %d}\n", n, r + 1);
      }
      if (res.rdzv) {
        const auto& x = *res.rdzv;
        std::printf(
            "JSON {\"phase\": \"rendezvous\", \"n\": %d, \"run\": %d, \"connect_ms\": %.2f, \"joins_ms\": %.2f, "
            "\"close_ms\": %.2f, \"rdzv_ms\": %.2f, \"release_ms\": %.2f, \"requests_per_node\": %.2f, \"io_cpu_ms\": %.2f, "
            "\"map_bytes\": %.0f, \"failed\": %d}\n",
            x.n, r + 1, x.connect_ms, x.joins_ms, x.close_ms, x.rdzv_ms, x.release_ms, x.requests_per_node, x.io_cpu_ms,
            x.map_bytes, x.failed);
        reps.push_back(x);
      }
      if (res.lease) {
        const auto& x = *res.lease;
        std::printf(
            "JSON {\"phase\": \"running\", \"n\": %d, \"window_s\": %.1f, \"interval_s\": %.1f, \"requests_per_node_s\": %.4f, "
            "\"set\": %.4f, \"wait\": %.4f, \"cancel_wait\": %.4f, \"other\": %.4f, \"bytes_out_per_node_s\": %.2f, "
            "\"bytes_in_per_node_s\": %.2f, \"io_cpu_us_per_node_s\": %.2f, \"lost\": %d}\n",
            x.n, x.window_s, x.interval_s, x.requests_per_node_s, x.sets, x.waits, x.cancels, x.others,
            x.bytes_out_per_node_s, x.bytes_in_per_node_s, x.io_cpu_us_per_node_s, x.lost);
        lease_rows.push_back(x);
      }
      std::fflush(stdout);
    }
    if (!reps.empty()) {
      RendezvousRow m;
      m.n = n;
      m.failed = reps.front().failed;
      const auto med = [&](double RendezvousRow::*field) {
        std::vector<double> v;
        for (const auto& x : reps) v.push_back(x.*field);
        return median(v);
      };
      m.connect_ms = med(&RendezvousRow::connect_ms);
      m.joins_ms = med(&RendezvousRow::joins_ms);
      m.map_bytes = med(&RendezvousRow::map_bytes);
      m.close_ms = med(&RendezvousRow::close_ms);
      m.rdzv_ms = med(&RendezvousRow::rdzv_ms);
      m.release_ms = med(&RendezvousRow::release_ms);
      m.requests_per_node = med(&RendezvousRow::requests_per_node);
      m.io_cpu_ms = med(&RendezvousRow::io_cpu_ms);
      rdzv_rows.push_back(m);
    }
  }

  std::printf("\nRendezvous (min = max = N; median of %d; ms)\n\n", args.repeat);
  std::printf(
      "| N | connect | joins arrive | round closed | last RoundRecord | store io thread CPU | requests/node | "
      "map bytes |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  for (const auto& x : rdzv_rows) {
    std::printf("| %d | %.1f | %.1f | %.1f | %.1f%s | %.1f | %.1f | %.0f |\n", x.n, x.connect_ms, x.joins_ms,
                x.close_ms, x.rdzv_ms, x.failed ? " (no agent could use its answer)" : "", x.io_cpu_ms,
                x.requests_per_node, x.map_bytes);
  }
  std::printf(
      "(connect: all agents connected, from the first thread's start; the others from the first join/ SET the "
      "server saw: the last join/ SET, the RoundHost's close, the last agent holding its RoundRecord)\n");
  if (!lease_rows.empty()) {
    std::printf("\nRunning (node_timeout %.0f s, lease interval %.1f s, window %.0f s; per node per second)\n\n",
                args.node_timeout_s, lease_rows.front().interval_s, args.window_s);
    std::printf(
        "| N | requests | SET | WAIT | CANCEL_WAIT | other | bytes out | bytes in | io thread CPU µs | lost |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
    for (const auto& x : lease_rows) {
      std::printf("| %d | %.3f | %.3f | %.3f | %.3f | %.3f | %.1f | %.2f | %.1f | %d |\n", x.n, x.requests_per_node_s,
                  x.sets, x.waits, x.cancels, x.others, x.bytes_out_per_node_s, x.bytes_in_per_node_s,
                  x.io_cpu_us_per_node_s, x.lost);
    }
  }
  if (!args.keeper_sizes.empty()) {
    std::printf(
        "\nThe store host's share alone: RoundKeeper, N joins, the waiting line once, the map's pages encoded "
        "at the close; one agent's decode_pages() of the map (thread CPU time, median of 5)\n\n");
    std::printf("| N | N joins CPU ms | per join µs | waiting line bytes | map bytes | decode_pages CPU ms |\n");
    std::printf("|---|---|---|---|---|---|\n");
    for (int n : args.keeper_sizes) {
      std::vector<KeeperRow> reps;
      for (int r = 0; r < 5; ++r) reps.push_back(keeper_alone(n));
      std::sort(reps.begin(), reps.end(), [](const auto& a, const auto& b) { return a.joins_ms < b.joins_ms; });
      const auto& x = reps[2];
      std::printf(
          "JSON {\"phase\": \"keeper\", \"n\": %d, \"joins_ms\": %.3f, \"status_bytes\": %zu, \"map_bytes\": %zu, "
          "\"decode_ms\": %.3f}\n",
          x.n, x.joins_ms, x.status_bytes, x.map_bytes, x.decode_ms);
      std::printf("| %d | %.2f | %.1f | %zu | %zu | %s |\n", x.n, x.joins_ms, x.joins_ms * 1000 / x.n, x.status_bytes,
                  x.map_bytes, x.decode_ms < 0 ? "unreadable" : (std::to_string(x.decode_ms).substr(0, 5)).c_str());
    }
  }
  for (const auto& e : errors) std::printf("error: %s\n", e.c_str());
  return errors.empty() ? 0 : 1;
}
