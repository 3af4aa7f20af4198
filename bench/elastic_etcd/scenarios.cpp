#include "bench/elastic_etcd/scenarios.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <system_error>
#include <thread>
#include <utility>

#include "bench/bench_util.hpp"
#include "bench/elastic_etcd/coordinator.hpp"
#include "bench/elastic_etcd/counting_proxy.hpp"
#include "launcher/cluster/attempt_steps.hpp"
#include "launcher/cluster/records.hpp"
#include "launcher/cluster/rounds.hpp"
#include "rendezvous/etcd_client.hpp"

namespace rankrun::bench::etcd_bench {

namespace {

milliseconds ms_of(double seconds) { return milliseconds(static_cast<long long>(seconds * 1000)); }

double ms_or_none(const std::optional<Clock::time_point>& from, const std::optional<Clock::time_point>& to) {
  return from && to ? ms_between(*from, *to) : -1;
}

// A round of exactly `n` nodes (last call 30 s, join timeout 600 s).
cluster::RoundRules rules_of(int n) {
  cluster::RoundRules rules;
  rules.min_nodes = n;
  rules.max_nodes = n;
  rules.last_call = std::chrono::seconds(30);
  rules.join_timeout = std::chrono::seconds(600);
  return rules;
}

// `n` agents against the etcd at `port` with `node_timeout`; NodeLink's reply timeout (a third of
// the node timeout, at least 0.3 s) unless --reply-timeout says otherwise.
AgentSettings agent_settings(int n, std::uint16_t port, milliseconds node_timeout, const Args& args) {
  AgentSettings settings;
  settings.n = n;
  settings.port = port;
  settings.node_timeout = node_timeout;
  settings.reply_timeout =
      args.reply_timeout_s > 0 ? ms_of(args.reply_timeout_s) : std::max(milliseconds(300), node_timeout / 3);
  return settings;
}

}  // namespace

// --- 1 and 2: rendezvous, then the running job ---------------------------------------------------

RunResult run_once(int n, bool with_leases, const Args& args) {
  RunResult result;
  EtcdServer etcd(args.etcd, args.tmp);
  const auto node_timeout = ms_of(args.node_timeout_s);
  const auto interval = cluster::lease_interval(node_timeout);
  Coordinator coordinator(etcd.port(), node_timeout, rules_of(n));
  if (!coordinator.wait_elected(std::chrono::seconds(30))) {
    result.error = "the coordinator was not elected within 30 s: " + coordinator.trace().failed;
    return result;
  }
  double idle_cpu_ms_s = -1;
  if (with_leases) {
    // etcd's own share (raft ticks, the coordinator's lease and watch) before any agent.
    const double c0 = etcd.cpu_s();
    std::this_thread::sleep_for(std::chrono::seconds(3));
    idle_cpu_ms_s = (etcd.cpu_s() - c0) / 3 * 1000;
  }
  Control ctl;
  AgentSettings settings = agent_settings(n, etcd.port(), node_timeout, args);
  settings.poll = ms_of(args.poll_s);
  settings.waiting_keep_alive = args.waiting_keep_alive;
  const auto t_spawn = Clock::now();
  std::optional<Agents> agents;
  try {
    agents.emplace(settings, ctl);
  } catch (const std::system_error& e) {
    result.error = "could not start " + std::to_string(n) + " agent threads: " + e.what();
    return result;
  }
  if (!wait_count(ctl, ctl.connected, n, std::chrono::seconds(120))) {
    result.error =
        "only " + std::to_string(count_of(ctl, ctl.connected)) + " of " + std::to_string(n) + " agents connected";
    return result;
  }
  const auto t_connected = Clock::now();
  set_stage(ctl, 1);
  if (!wait_count(ctl, ctl.granted, n, std::chrono::seconds(120))) {
    result.error =
        "only " + std::to_string(count_of(ctl, ctl.granted)) + " of " + std::to_string(n) + " agents got a lease";
    return result;
  }
  const auto t_granted = Clock::now();
  const auto m0 = read_metrics(etcd);
  const double io0 = coordinator.io_cpu_s();
  const auto t_release = Clock::now();
  set_stage(ctl, 2);
  // Progress on stderr every 5 s while it lasts; given up after --rdzv-limit.
  const auto progress = [&] {
    const auto t = coordinator.trace();
    return std::to_string(count_of(ctl, ctl.joined)) + " of " + std::to_string(n) +
           " agents answered; the coordinator saw " + std::to_string(t.joins) + " joins, " + std::to_string(t.lefts) +
           " joins deleted (their lease lapsed), " + std::to_string(t.assigns) + " answers" +
           (t.closed ? ", the round closed" : "") +
           (t.failed.empty() ? std::string() : "; coordinating failed: " + t.failed);
  };
  bool all_joined = false;
  for (auto waited = milliseconds(0); waited < ms_of(args.rdzv_limit_s); waited += std::chrono::seconds(5)) {
    if ((all_joined = wait_count(ctl, ctl.joined, n, std::chrono::seconds(5)))) break;
    std::fprintf(stderr, "N=%d, %.0f s after the release: %s\n", n, ms_between(t_release, Clock::now()) / 1000,
                 progress().c_str());
  }
  if (!all_joined) {
    result.error = "no round within " + std::to_string(static_cast<int>(args.rdzv_limit_s)) + " s: " + progress();
    const auto log = etcd.log_tail();
    if (!log.empty()) std::fprintf(stderr, "etcd's log, its end:\n%s\n", log.c_str());
    ctl.abort = true;
    return result;
  }
  const auto m1 = read_metrics(etcd);
  const double io1 = coordinator.io_cpu_s();
  const auto t = coordinator.trace();
  {
    RendezvousRow row;
    row.n = n;
    Clock::time_point first = Clock::time_point::max(), last{}, last_put{}, last_assign{};
    double calls = 0;
    for (const auto& a : agents->results()) {
      first = std::min(first, a.done);
      last = std::max(last, a.done);
      if (a.join_put) last_put = std::max(last_put, *a.join_put);
      if (a.assign_seen) last_assign = std::max(last_assign, *a.assign_seen);
      calls += static_cast<double>(a.calls.load(std::memory_order_relaxed));
    }
    row.join_put_ms = ms_between(t_release, last_put);
    row.assign_seen_ms = ms_between(t_release, last_assign);
    row.agent_calls = calls / n;
    const auto first_error_text = first_error(agents->results(), &row.failed);
    if (row.failed > 0) result.error = std::to_string(row.failed) + " agents got no round: " + first_error_text;
    const auto d = m1 - m0;
    row.connect_ms = ms_between(t_spawn, t_connected);
    row.grant_ms = ms_between(t_connected, t_granted);
    row.first_join_ms = ms_or_none(t_release, t.first_join);
    row.last_join_ms = ms_or_none(t_release, t.last_join);
    row.close_ms = ms_or_none(t_release, t.closed);
    row.writer_ms = ms_or_none(t.closed, t.last_assign);
    row.first_round_ms = ms_between(t_release, first);
    row.rdzv_ms = ms_between(t_release, last);
    row.calls_per_node = d.started_all / n;
    for (std::size_t i = 0; i < k_methods.size(); ++i) row.by_method[i] = d.started[i] / n;
    row.etcd_cpu_ms = d.cpu_s * 1000;
    row.io_cpu_ms = (io1 - io0) * 1000;
    row.map_bytes = static_cast<double>(t.map_bytes);
    row.lefts = t.lefts;
    result.rdzv = row;
  }
  // The agents that failed once running: their lease lapsed while they waited for their answer.
  const auto end_job = [&] {
    write_key(etcd.port(), cluster::stop_key(cluster::attempt_id(0, 0)), "bench over");
    agents->join();
    std::string first_run_error;
    for (const auto& a : agents->results()) {
      if (a.run_error.empty()) continue;
      ++result.rdzv->lease_failed;
      if (first_run_error.empty()) first_run_error = a.run_error;
    }
    if (!first_run_error.empty() && result.error.empty()) {
      result.error = std::to_string(result.rdzv->lease_failed) + " agents failed once running: " + first_run_error;
    }
  };
  if (!result.error.empty()) return result;  // ~Agents ends them
  if (!with_leases) {
    end_job();
    return result;
  }

  // The running job, through the counting proxy.
  CountingProxy proxy(etcd.port());
  const auto window = ms_of(args.window_s);
  // Every agent moves to the proxy within a lease interval (after its wait); the window starts
  // an interval after that.
  ctl.run_port = proxy.port();
  const auto window_start = Clock::now() + 2 * interval;
  std::this_thread::sleep_until(window_start);
  const auto p0 = proxy.counts();
  const auto w0 = read_metrics(etcd);
  const double wio0 = coordinator.io_cpu_s(), pcpu0 = proxy.cpu_s();
  std::this_thread::sleep_until(window_start + window);
  const auto p1 = proxy.counts();
  const auto w1 = read_metrics(etcd);
  const double wio1 = coordinator.io_cpu_s(), pcpu1 = proxy.cpu_s();
  // The job ends: the stop notice wakes every node's wait.
  end_job();
  const double per = 1.0 / (n * args.window_s);
  const auto req = [&](std::size_t i) { return static_cast<double>(p1.requests[i] - p0.requests[i]) * per; };
  LeaseRow row;
  row.n = n;
  row.window_s = args.window_s;
  row.interval_s = std::chrono::duration<double>(interval).count();
  row.http_per_node_s = static_cast<double>(p1.all_requests() - p0.all_requests()) * per;
  row.keepalive = req(4);
  row.txn = req(2);
  row.watch = req(7);
  row.other = std::max(0.0, row.http_per_node_s - row.keepalive - row.txn - row.watch);
  row.connections_per_node_s = static_cast<double>(p1.connections - p0.connections) * per;
  row.bytes_up_per_node_s = static_cast<double>(p1.up - p0.up) * per;
  row.bytes_down_per_node_s = static_cast<double>(p1.down - p0.down) * per;
  const auto wd = w1 - w0;
  row.grpc_calls_per_node_s = wd.started_all * per;
  row.grpc_in_per_node_s = wd.grpc_in_bytes * per;
  row.grpc_out_per_node_s = wd.grpc_out_bytes * per;
  row.etcd_cpu_us_per_node_s = wd.cpu_s * 1e6 * per;
  row.io_cpu_us_per_node_s = (wio1 - wio0) * 1e6 * per;
  row.proxy_cpu_us_per_node_s = (pcpu1 - pcpu0) * 1e6 * per;
  row.etcd_idle_cpu_ms_s = idle_cpu_ms_s;
  row.lost = coordinator.trace().lost;
  if (const auto e = proxy.error(); !e.empty() && result.error.empty()) result.error = "proxy: " + e;
  result.lease = row;
  return result;
}

// --- 3: a node's death -------------------------------------------------------------------------------

DeathRow run_death(Death mode, int run, const Args& args) {
  DeathRow row;
  row.mode = mode;
  row.run = run;
  const int n = args.death_nodes;
  EtcdServer etcd(args.etcd, args.tmp);
  const auto node_timeout = ms_of(args.death_timeout_s);
  Coordinator coordinator(etcd.port(), node_timeout, rules_of(n));
  if (!coordinator.wait_elected(std::chrono::seconds(30))) {
    row.error = "the coordinator was not elected within 30 s";
    return row;
  }
  Control ctl;
  ctl.death = mode;
  const AgentSettings settings = agent_settings(n, etcd.port(), node_timeout, args);
  Agents agents(settings, ctl);
  const auto fail = [&](std::string why) {
    row.error = std::move(why);
    return row;
  };
  if (!wait_count(ctl, ctl.connected, n, std::chrono::seconds(60))) return fail("agents did not connect");
  set_stage(ctl, 1);
  if (!wait_count(ctl, ctl.granted, n, std::chrono::seconds(60))) return fail("agents got no lease");
  set_stage(ctl, 2);
  if (!wait_count(ctl, ctl.joined, n, std::chrono::seconds(60))) return fail("no round formed");
  int failed = 0;
  if (auto e = first_error(agents.results(), &failed); failed > 0) return fail(std::move(e));
  // A few lease intervals of a running job, then node rank N-1 dies at its next refresh.
  std::this_thread::sleep_for(std::chrono::seconds(2));
  ctl.victim = n - 1;
  auto t = coordinator.trace();
  const auto deadline = Clock::now() + node_timeout + std::chrono::seconds(15);
  while (!t.restart && Clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(5));
    t = coordinator.trace();
  }
  write_key(etcd.port(), cluster::stop_key(cluster::attempt_id(0, 0)), "bench over");
  agents.join();
  for (const auto& a : agents.results()) {
    if (!a.run_error.empty() && a.node_rank != n - 1) return fail("a running agent failed: " + a.run_error);
  }
  const AgentResult* victim = nullptr;
  for (const auto& a : agents.results()) {
    if (a.node_rank == n - 1) victim = &a;
  }
  if (!victim || !victim->died || !victim->last_refresh) return fail("the victim did not die");
  const auto from = mode == Death::Silent ? *victim->last_refresh : *victim->died;
  row.lapsed_ms = ms_or_none(from, t.lapsed);
  row.restart_ms = ms_or_none(from, t.restart);
  row.why = t.restart_why;
  if (!t.restart) row.error = "no restart decision within the node timeout + 15 s";
  return row;
}

// --- 4: the writer alone ---------------------------------------------------------------------

WriterRow writer_alone(int n, const Args& args) {
  EtcdServer etcd(args.etcd, args.tmp);
  // The coordinator's options (EtcdCoordinator::connect) at the default node timeout.
  rdzv::EtcdOptions options;
  options.connect_timeout = std::max(milliseconds(300), ms_of(args.node_timeout_s) / 3);
  options.timeout = options.connect_timeout;
  options.user_timeout = options.connect_timeout;
  rdzv::EtcdClient client(k_host, etcd.port(), k_prefix, options);
  std::vector<std::pair<std::string, std::string>> writes;
  for (int i = 0; i < n; ++i) {
    writes.emplace_back(cluster::assign_key(bench_node(i).instance), cluster::encode(cluster::Assignment{0, i, n, 2}));
  }
  client.set("warm-up", "1");
  const auto m0 = read_metrics(etcd);
  const auto t0 = Clock::now();
  client.set_many(writes);
  const auto t1 = Clock::now();
  const auto m1 = read_metrics(etcd);
  WriterRow row;
  row.n = n;
  row.total_ms = ms_between(t0, t1);
  row.fsyncs_per_put = (m1.fsyncs - m0.fsyncs) / n;
  return row;
}

}  // namespace rankrun::bench::etcd_bench
