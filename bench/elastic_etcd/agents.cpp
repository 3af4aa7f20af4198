#include "bench/elastic_etcd/agents.hpp"

#include <unistd.h>

#include <cstdio>
#include <exception>
#include <memory>
#include <string_view>

#include "bench/elastic_etcd/etcd_server.hpp"
#include "launcher/cluster/attempt_steps.hpp"
#include "launcher/cluster/elastic_join.hpp"
#include "launcher/cluster/link_store.hpp"
#include "launcher/cluster/rounds.hpp"
#include "rendezvous/etcd_client.hpp"

namespace rankrun::bench::etcd_bench {

namespace rdzv = ::rankrun::rendezvous;

cluster::NodeRecord bench_node(int i) {
  // Instance ids as long as rankrun's own (pid, '-', two random numbers).
  char instance[40];
  std::snprintf(instance, sizeof(instance), "%d-%020d", static_cast<int>(::getpid()), i);
  return cluster::NodeRecord{-1, "10.0." + std::to_string(i / 250) + "." + std::to_string(i % 250), 8, "bench",
                             instance};
}

namespace {

// The agent's LinkStore, noting when the steps of its join return.
class TimedStore final : public cluster::LinkStore {
 public:
  TimedStore(std::unique_ptr<cluster::LinkStore> inner, AgentResult& out) : m_inner(std::move(inner)), m_out(out) {}
  void set(std::string_view key, std::string_view value) override { next().set(key, value); }
  std::string get(std::string_view key) override { return next().get(key); }
  std::string compare_set(std::string_view key, std::string_view expected, std::string_view desired) override {
    return next().compare_set(key, expected, desired);
  }
  std::int64_t add(std::string_view key, std::int64_t delta) override { return next().add(key, delta); }
  void append(std::string_view key, std::string_view value) override { next().append(key, value); }
  bool check(const std::vector<std::string>& keys) override { return next().check(keys); }
  std::vector<std::string> multi_get(const std::vector<std::string>& keys) override { return next().multi_get(keys); }
  bool delete_key(std::string_view key) override { return next().delete_key(key); }
  bool wait(const std::vector<std::string>& keys, milliseconds timeout) override {
    const bool seen = next().wait(keys, timeout);
    if (seen && !m_out.assign_seen && keys.size() == 1 && keys[0].rfind("assign/", 0) == 0)
      m_out.assign_seen = Clock::now();
    return seen;
  }
  void interrupt() override { m_inner->interrupt(); }
  std::string local_address() override { return m_inner->local_address(); }
  bool has_leases() const override { return m_inner->has_leases(); }
  std::int64_t grant(milliseconds ttl) override { return next().grant(ttl); }
  void set_leased(std::string_view key, std::string_view value, std::int64_t lease) override {
    next().set_leased(key, value, lease);
    if (!m_out.join_put && key.substr(0, 5) == "join/") m_out.join_put = Clock::now();
  }
  void keep_alive(std::int64_t lease) override { next().keep_alive(lease); }
  void revoke(std::int64_t lease) override { next().revoke(lease); }

 private:
  // The wrapped store, one more call counted.
  cluster::LinkStore& next() {
    m_out.calls.fetch_add(1, std::memory_order_relaxed);
    return *m_inner;
  }
  std::unique_ptr<cluster::LinkStore> m_inner;
  AgentResult& m_out;
};

std::unique_ptr<cluster::LinkStore> connect_agent(std::uint16_t port, milliseconds reply_timeout) {
  // As NodeLink::connect(), with a longer connect timeout (NodeLink retries its connect).
  rdzv::EtcdOptions options;
  options.connect_timeout = std::chrono::seconds(60);
  options.timeout = reply_timeout;
  options.user_timeout = reply_timeout;
  return cluster::wrap(std::make_unique<rdzv::EtcdClient>(k_host, port, k_prefix, options));
}

void agent_main(int i, const AgentSettings& s, Control& ctl, AgentResult& out) {
  int counted = 0;  // 1: in ctl.connected, 2: in ctl.granted too, 3: in ctl.joined too
  const auto count = [&](int& field) {
    std::unique_lock lock(ctl.mutex);
    ++field;
    ++counted;
    ctl.main_cv.notify_one();
    ctl.agents_cv.wait(lock, [&] { return ctl.stage >= counted || ctl.abort; });
    return !ctl.abort;
  };
  std::unique_ptr<cluster::LinkStore> store;
  std::int64_t lease = 0;
  try {
    store = std::make_unique<TimedStore>(connect_agent(s.port, s.reply_timeout), out);
    if (!count(ctl.connected)) return;
    lease = store->grant(s.node_timeout);
    if (!count(ctl.granted)) return;
    const cluster::NodeRecord me = bench_node(i);
    // The waiting node's store traffic, as NodeLink's (its printing left out): the lease renewed
    // once per lease interval (unless --no-waiting-keep-alive), the spare notice, the waiting line.
    const auto keep_every = cluster::lease_interval(s.node_timeout);
    cluster::JoinProgress progress(me.instance, s.waiting_keep_alive ? lease : 0, keep_every);
    const auto answer = cluster::join_round(
        *store, me,
        [&](cluster::LinkStore& c) {
          if (ctl.abort) return false;
          progress.step(c, [](const std::string&) {});
          return true;
        },
        s.poll.count() > 0 ? s.poll : keep_every, lease);
    out.done = Clock::now();
    if (answer.kind == cluster::JoinAnswer::Kind::Round && static_cast<int>(answer.round.members.size()) == s.n) {
      out.node_rank = answer.node_rank;
      out.ok = out.node_rank >= 0 && answer.round.members[static_cast<std::size_t>(out.node_rank)].host == me.host;
    }
    if (!out.ok)
      out.error = "join answer: kind " + std::to_string(static_cast<int>(answer.kind)) + " " + answer.message;
  } catch (const std::exception& e) {
    out.error = e.what();
    out.ok = false;
    if (out.done == Clock::time_point{}) out.done = Clock::now();
  }
  {
    // Counted as done also when it failed, so that the main thread does not wait for it.
    std::lock_guard lock(ctl.mutex);
    if (counted < 1) ++ctl.connected;
    if (counted < 2) ++ctl.granted;
    ++ctl.joined;
    ctl.main_cv.notify_one();
  }
  if (!out.ok || ctl.abort) return;
  // At once, NodeLink::watch's steps in etcd mode: the lease key once (with the node's lease),
  // then a keep_alive per lease interval and a wait for the stop notice in between.
  try {
    cluster::NodeLease node_lease{cluster::lease_prefix(0) + std::to_string(out.node_rank), lease};
    const int attempt = cluster::attempt_id(0, 0);
    const auto interval = cluster::lease_interval(s.node_timeout);
    bool moved = false;
    for (;;) {
      cluster::refresh_lease(*store, node_lease);
      if (ctl.victim.load() == out.node_rank) {
        out.last_refresh = Clock::now();
        if (ctl.death == Death::Revoke) {
          out.died = Clock::now();
          store->revoke(lease);
        } else {
          out.died = out.last_refresh;
        }
        return;  // the connections close with the client
      }
      if (cluster::await_notice(*store, attempt, interval).published) break;
      if (ctl.abort) break;
      if (const auto port = ctl.run_port.load(); port != 0 && !moved) {
        // The running phase's traffic goes through the counting proxy from now on.
        store.reset();
        store = connect_agent(port, s.reply_timeout);
        moved = true;
      }
    }
  } catch (const std::exception& e) {
    out.run_error = e.what();
  }
}

}  // namespace

Agents::Agents(const AgentSettings& s, Control& ctl) : m_ctl(ctl), m_results(static_cast<std::size_t>(s.n)) {
  m_threads.reserve(static_cast<std::size_t>(s.n));
  for (int i = 0; i < s.n; ++i) {
    m_threads.emplace_back(agent_main, i, std::cref(s), std::ref(ctl),
                           std::ref(m_results[static_cast<std::size_t>(i)]));
  }
}

Agents::~Agents() {
  {
    std::lock_guard lock(m_ctl.mutex);
    m_ctl.abort = true;
  }
  m_ctl.agents_cv.notify_all();
  join();
}

void Agents::join() {
  for (auto& t : m_threads) {
    if (t.joinable()) t.join();
  }
}

bool wait_count(Control& ctl, int& field, int n, milliseconds timeout) {
  std::unique_lock lock(ctl.mutex);
  return ctl.main_cv.wait_for(lock, timeout, [&] { return field >= n; });
}

int count_of(Control& ctl, const int& field) {
  std::lock_guard lock(ctl.mutex);
  return field;
}

void set_stage(Control& ctl, int stage) {
  {
    std::lock_guard lock(ctl.mutex);
    ctl.stage = stage;
  }
  ctl.agents_cv.notify_all();
}

void write_key(std::uint16_t port, const std::string& key, const std::string& value) {
  rdzv::EtcdOptions o;
  o.connect_timeout = std::chrono::seconds(10);
  o.timeout = std::chrono::seconds(30);
  rdzv::EtcdClient(k_host, port, k_prefix, o).set(key, value);
}

std::string first_error(const std::vector<AgentResult>& results, int* failed) {
  std::string first;
  *failed = 0;
  for (const auto& a : results) {
    if (!a.ok) {
      ++*failed;
      if (first.empty()) first = a.error;
    }
  }
  return first;
}

}  // namespace rankrun::bench::etcd_bench
