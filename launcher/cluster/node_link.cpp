#include "launcher/cluster/node_link.hpp"

#include <unistd.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <random>
#include <utility>
#include <spdlog/spdlog.h>

namespace rankrun::launcher::cluster {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
namespace rdzv = rankrun::rendezvous;

// One connection attempt while the store host may not be up yet: short, so that an
// unreachable endpoint is reported within a second, then longer.
constexpr milliseconds k_rdzv_first_try{500};
constexpr milliseconds k_rdzv_connect_try{2000};
// How often the progress line is refreshed while nodes are missing (and at once on a change).
constexpr milliseconds k_progress_every{5000};
constexpr milliseconds k_progress_first{1000};
// One reconnection attempt after the rendezvous (the watcher retries until --node-timeout).
constexpr milliseconds k_reconnect_try{200};

double seconds_left(Clock::time_point deadline) {
  return std::chrono::duration<double>(deadline - Clock::now()).count();
}

std::string make_instance() {
  std::random_device rd;
  return std::to_string(::getpid()) + "-" + std::to_string(rd()) + std::to_string(rd());
}

std::string endpoint(const LinkSettings& s) {
  return (s.store_host.find(':') != std::string::npos ? "[" + s.store_host + "]" : s.store_host) + ":" +
         std::to_string(s.store_port);
}

}  // namespace

milliseconds lease_interval(milliseconds node_timeout) {
  return std::clamp(node_timeout / 5, milliseconds(200), milliseconds(3000));
}

NodeLink::NodeLink(boost::asio::io_context& io, LinkSettings settings, LinkHandlers handlers)
    : m_io(io),
      m_settings(std::move(settings)),
      m_handlers(std::move(handlers)),
      m_instance(make_instance()),
      m_alive(std::make_shared<bool>(true)),
      m_node_rank(m_settings.elastic ? -1 : m_settings.node_rank),
      m_nnodes(m_settings.nnodes) {}

std::pair<int, int> NodeLink::place() const {
  const std::lock_guard lock(m_mutex);
  return {m_node_rank, m_nnodes};
}

void NodeLink::rejoin() {
  {
    const std::lock_guard lock(m_mutex);
    m_rejoin = true;
  }
  m_wake.notify_all();
}

NodeLink::~NodeLink() { stop(); }

void NodeLink::start() {
  m_watcher = std::thread([this] { watcher_main(); });
  m_commander = std::thread([this] { commander_main(); });
}

void NodeLink::start_aborted(const std::string& message, std::function<void()> done) {
  abort_rendezvous(message, std::move(done));
  m_commander = std::thread([this] { commander_main(); });
}

void NodeLink::stop() {
  {
    const std::lock_guard lock(m_mutex);
    if (m_stopping && !m_watcher.joinable() && !m_commander.joinable()) return;
    m_stopping = true;
    if (m_watcher_client) m_watcher_client->interrupt();
    if (m_commander_client) m_commander_client->interrupt();
  }
  *m_alive = false;
  m_wake.notify_all();
  if (m_watcher.joinable()) m_watcher.join();
  if (m_commander.joinable()) m_commander.join();
  // etcd: the node's keys (its join, its lease key) go now rather than when the lease lapses;
  // the coordinator sees a waiting node leave, or a member that sent its result go.
  if (m_lease != 0) {
    const auto lease = std::exchange(m_lease, 0);
    try {
      connect(std::min(k_reconnect_try, m_settings.node_timeout))->revoke(lease);
    } catch (const rdzv::StoreError&) {
    }
  }
}

bool NodeLink::stopping() const {
  const std::lock_guard lock(m_mutex);
  return m_stopping;
}

void NodeLink::hold(LinkStore* client, bool watcher) {
  const std::lock_guard lock(m_mutex);
  (watcher ? m_watcher_client : m_commander_client) = client;
  if (client && m_stopping) client->interrupt();
}

void NodeLink::post(std::function<void()> fn) {
  boost::asio::post(m_io, [alive = m_alive, fn = std::move(fn)] {
    if (*alive) fn();
  });
}

std::unique_ptr<LinkStore> NodeLink::connect(milliseconds connect_timeout) {
  // A reply that does not come within a third of the node timeout means the link is gone.
  const auto reply_timeout = std::max(milliseconds(300), m_settings.node_timeout / 3);
  if (m_settings.etcd) {
    rdzv::EtcdOptions options;
    options.connect_timeout = connect_timeout;
    options.timeout = reply_timeout;
    options.user_timeout = reply_timeout;
    return wrap(std::make_unique<rdzv::EtcdClient>(m_settings.store_host, m_settings.store_port, m_settings.etcd_prefix,
                                                   options));
  }
  rdzv::ClientOptions options;
  options.connect_timeout = connect_timeout;
  options.timeout = reply_timeout;
  options.user_timeout = reply_timeout;
  options.key_space = k_agents_key_space;
  return wrap(std::make_unique<rdzv::StoreClient>(m_settings.store_host, m_settings.store_port, options));
}

std::string NodeLink::reason(std::string what) const {
  // The client names the endpoint itself ("cannot reach etcd at H:P: ...", "etcd at H:P: ..."):
  // the messages that use this already do.
  for (const std::string& prefix : {"cannot reach " + where() + ": ", where() + ": "}) {
    if (what.rfind(prefix, 0) == 0) return what.substr(prefix.size());
  }
  return what;
}

std::string NodeLink::where() const { return (m_settings.etcd ? "etcd at " : "the store host ") + endpoint(m_settings); }

std::int64_t NodeLink::node_lease(LinkStore& client) {
  if (!client.has_leases()) return 0;
  if (m_lease != 0) {
    try {
      client.keep_alive(m_lease);
      return m_lease;
    } catch (const rdzv::StoreError&) {
      // Lapsed (the job counted this node as lost): a new one.
    }
  }
  const auto lease = client.grant(m_settings.node_timeout);
  const std::lock_guard lock(m_mutex);
  m_lease = lease;
  return lease;
}

std::unique_ptr<LinkStore> NodeLink::connect_for_rendezvous() {
  const auto deadline = Clock::now() + m_settings.rdzv_timeout;
  auto next_report = Clock::now();
  auto try_for = k_rdzv_first_try;
  while (!stopping()) {
    try {
      const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
      return connect(std::clamp(left, milliseconds(1), try_for));
    } catch (const rdzv::StoreError& e) {
      try_for = k_rdzv_connect_try;
      // "cannot connect to the store at H:P within N ms: Connection refused" -> the system's words.
      std::string why = reason(e.what());
      if (const auto at = why.find(" ms: "); at != std::string::npos) why = why.substr(at + 5);
      if (Clock::now() >= deadline) {
        post([this, why] {
          const bool elastic = m_settings.elastic;
          m_handlers.rendezvous_failed(
              kExitRendezvous, "could not reach " + where() + " within " +
                                   (elastic ? "join_timeout (" : "the rendezvous timeout (") +
                                   std::to_string(m_settings.rdzv_timeout.count() / 1000) + " s): " + why +
                                   (m_settings.etcd ? "; check --rdzv-endpoint and that etcd runs there"
                                    : elastic       ? "; check --rdzv-endpoint and that rankrun runs on that host"
                                                    : "; check --master-addr/--master-port and that node 0 runs"));
        });
        return nullptr;
      }
      if (Clock::now() >= next_report) {
        spdlog::warn("cannot reach {}: {}; retrying for {:.0f} s more (--rdzv-conf {}=)", where(), why,
                     seconds_left(deadline), m_settings.elastic ? "join_timeout" : "timeout");
        next_report = Clock::now() + milliseconds(10000);
      }
    }
  }
  return nullptr;
}

bool NodeLink::rendezvous(LinkStore& client) {
  const auto& s = m_settings;
  const auto deadline = Clock::now() + s.rdzv_timeout;
  NodeRecord me{s.node_rank, s.local_addr.empty() ? client.local_address() : s.local_addr, s.nproc, s.run_id, m_instance};
  const auto mine = encode(me);
  const auto current = client.compare_set(node_key(s.node_rank), "", mine);
  if (current != mine) {
    const auto other = decode_node(current);
    const auto message = "node rank " + std::to_string(s.node_rank) + " is claimed by two nodes: " +
                         (other ? other->host : std::string("another node")) + " (first) and " + me.host +
                         "; give every node its own --node-rank from 0 to " + std::to_string(s.nnodes - 1);
    // The nodes already waiting learn it too, instead of waiting for the timeout.
    client.compare_set(k_complete_key, "", "abort\n" + message);
    post([this, message] { m_handlers.rendezvous_failed(kExitUsage, message); });
    return false;
  }
  client.append(k_roster_key, std::to_string(s.node_rank) + ",");
  if (client.add(k_arrived_key, 1) >= s.nnodes) client.compare_set(k_complete_key, "", "ok");

  std::string last_line;
  auto next_progress = Clock::now() + k_progress_first;
  const auto until_next = [&] {
    const auto next = std::min(next_progress, deadline);
    return std::clamp(std::chrono::duration_cast<milliseconds>(next - Clock::now()), milliseconds(1), k_progress_every);
  };
  while (!client.wait({k_complete_key}, until_next())) {
    if (stopping()) return false;
    const auto arrived = parse_roster(client.get(k_roster_key));
    const double left = seconds_left(deadline);
    if (left <= 0) {
      auto summary = format_waiting(arrived, s.nnodes, 0);
      summary = summary.substr(19, summary.rfind(';') - 19);  // without "waiting for nodes: " and the time left
      const auto message = "the rendezvous timed out after " + std::to_string(s.rdzv_timeout.count() / 1000) + " s: " + summary +
                           "; start rankrun on every node with the same --nnodes, --master-addr and --master-port, or "
                           "raise --rdzv-conf timeout=";
      // The other nodes learn it now, with this message, rather than each at its own timeout.
      if (client.compare_set(k_complete_key, "", "abort\n" + message) == "ok") break;
      post([this, message] { m_handlers.rendezvous_failed(kExitRendezvous, message); });
      return false;
    }
    const auto line = format_waiting(arrived, s.nnodes, left);
    const auto changed = line.substr(0, line.rfind(';')) != last_line.substr(0, last_line.rfind(';'));
    if (changed || Clock::now() >= next_progress) {
      spdlog::warn("{}", line);
      last_line = line;
      next_progress = Clock::now() + k_progress_every;
    }
  }
  const auto complete = client.get(k_complete_key);
  if (complete != "ok") {
    const auto message = complete.substr(complete.find('\n') + 1);
    post([this, message] { m_handlers.rendezvous_failed(kExitRendezvous, "the rendezvous was aborted: " + message); });
    return false;
  }
  std::vector<std::string> keys;
  for (int i = 0; i < s.nnodes; ++i) keys.push_back(node_key(i));
  std::vector<NodeRecord> records;
  for (const auto& value : client.multi_get(keys)) {
    if (const auto r = decode_node(value)) records.push_back(*r);
  }
  try {
    auto map = plan_nodes(records, s.nnodes);
    post([this, map = std::move(map), node_rank = s.node_rank, host = me.host]() mutable {
      m_handlers.rendezvous_done(std::move(map), node_rank, host, -1);
    });
  } catch (const std::invalid_argument& e) {
    post([this, message = std::string(e.what())] { m_handlers.rendezvous_failed(kExitRendezvous, message); });
    return false;
  }
  {
    const std::lock_guard lock(m_mutex);
    m_rendezvous_done = true;
  }
  m_wake.notify_all();
  return true;
}

void NodeLink::watcher_main() {
  auto client = connect_for_rendezvous();
  if (!client) return;
  hold(client.get(), true);
  try {
    if (!(m_settings.elastic ? join_round(*client) : rendezvous(*client))) {
      hold(nullptr, true);
      return;
    }
  } catch (const rdzv::StoreError& e) {
    hold(nullptr, true);
    if (stopping()) return;
    post([this, why = reason(e.what())] {
      m_handlers.rendezvous_failed(kExitRendezvous, "lost " + where() + " during the rendezvous: " + why);
    });
    return;
  }
  // Elastic: each membership change ends the round; the node joins the next one once the Job
  // has stopped its workers (rejoin()).
  while (watch(client)) {
    try {
      // While this node stops its workers: its etcd lease must not lapse (it would be lost).
      for (;;) {
        {
          std::unique_lock lock(m_mutex);
          m_wake.wait_for(lock, lease_interval(m_settings.node_timeout), [this] { return m_stopping || m_rejoin; });
          if (m_stopping || m_rejoin) break;
        }
        if (m_lease == 0) continue;
        try {
          if (!client) {
            client = connect(std::min(k_reconnect_try, m_settings.node_timeout));
            hold(client.get(), true);
          }
          client->keep_alive(m_lease);
        } catch (const rdzv::StoreError&) {
          // Tried again next interval; the join that follows reports an etcd that stays away.
          hold(nullptr, true);
          client.reset();
        }
      }
      {
        const std::lock_guard lock(m_mutex);
        if (m_stopping) break;
        m_rejoin = false;
      }
      if (!client) {
        client = connect(m_settings.node_timeout);
        hold(client.get(), true);
      }
      if (!join_round(*client)) break;
    } catch (const rdzv::StoreError& e) {
      if (stopping()) break;
      post([this, why = reason(e.what())] { m_handlers.store_host_lost(why); });
      break;
    }
  }
  hold(nullptr, true);
}

// Elastic: ask the store host for a round and wait for its answer, printing the waiting line
// it keeps (rdzv/status) when it changes and every few seconds. A spare waits without limit:
// the store host tells it when it may join, or that the job is over.
bool NodeLink::join_round(LinkStore& client) {
  const auto& s = m_settings;
  const auto [previous_rank, unused] = place();
  (void)unused;
  const NodeRecord me{previous_rank, s.local_addr.empty() ? client.local_address() : s.local_addr, s.nproc, s.run_id, m_instance};
  std::string last_line;
  bool spare_told = false;
  auto next_progress = Clock::now() + k_progress_first;
  const auto lease = node_lease(client);
  // etcd: the lease (and the join with it) is kept alive while the node waits, however long
  // (a spare waits for the whole job).
  const auto keep_every = lease_interval(s.node_timeout);
  auto next_keep = Clock::now() + keep_every;
  const auto answer = cluster::join_round(
      client, me,
      [&](LinkStore& c) {
        if (stopping()) return false;
        if (lease != 0 && Clock::now() >= next_keep) {
          c.keep_alive(lease);
          next_keep = Clock::now() + keep_every;
        }
        if (!spare_told && c.check({spare_key(m_instance)})) {
          spare_told = true;
          spdlog::warn("{}", c.get(spare_key(m_instance)));
        }
        const auto line = c.check({k_status_key}) ? c.get(k_status_key) : std::string();
        if (line.empty() || spare_told) return true;
        const auto changed = line.substr(0, line.rfind(';')) != last_line.substr(0, last_line.rfind(';'));
        if (changed || Clock::now() >= next_progress) {
          spdlog::warn("waiting for nodes: {}", line);
          last_line = line;
          next_progress = Clock::now() + k_progress_every;
        }
        return true;
      },
      // etcd: once a lease interval (each wait is a watch opened on etcd: at thousands of
      // waiting nodes, etcd's gateway is what a round's close has to get through).
      lease != 0 ? keep_every : k_progress_first, lease);
  if (stopping()) return false;
  if (answer.kind != JoinAnswer::Kind::Round) {
    const bool closed = answer.kind == JoinAnswer::Kind::Closed;
    post([this, closed, message = answer.message] {
      m_handlers.rendezvous_failed(closed ? kExitRendezvousClosed : kExitRendezvous,
                                   closed ? "the rendezvous is closed: " + message : message);
    });
    return false;
  }
  const auto& members = answer.round.members;
  const int node_rank = answer.node_rank;
  const int nnodes = static_cast<int>(members.size());
  const int round = answer.round.round;
  try {
    auto map = plan_nodes(members, nnodes);
    {
      const std::lock_guard lock(m_mutex);
      m_node_rank = node_rank;
      m_nnodes = nnodes;
      m_round = round;
      m_watch_attempt = attempt_id(round, 0);
      m_rendezvous_done = true;
    }
    m_wake.notify_all();
    post([this, map = std::move(map), node_rank, host = me.host, round]() mutable {
      m_handlers.rendezvous_done(std::move(map), node_rank, host, round);
    });
  } catch (const std::invalid_argument& e) {
    post([this, message = std::string(e.what())] { m_handlers.rendezvous_failed(kExitRendezvous, message); });
    return false;
  }
  return true;
}

JoinAnswer join_round(LinkStore& client, const NodeRecord& me,
                      const std::function<bool(LinkStore&)>& waiting, milliseconds poll, std::int64_t lease) {
  JoinAnswer out;
  const auto assign = assign_key(me.instance);
  client.delete_key(assign);
  client.set_leased(join_key(me.instance), encode(me), lease);
  while (!client.wait({assign}, poll)) {
    if (!waiting(client)) {
      out.message = "stopped";
      return out;
    }
  }
  const auto answer = client.get(assign);
  if (answer.rfind("abort\n", 0) == 0 || answer.rfind("closed\n", 0) == 0) {
    out.kind = answer[0] == 'c' ? JoinAnswer::Kind::Closed : JoinAnswer::Kind::Abort;
    out.message = answer.substr(answer.find('\n') + 1);
    return out;
  }
  // The round's map, in pages; this node's entry must be the one it announced.
  const auto a = decode_assignment(answer);
  std::optional<RoundRecord> record;
  if (a) {
    std::vector<std::string> keys;
    for (int p = 0; p < a->pages; ++p) keys.push_back(round_map_key(a->round, p));
    record = decode_pages(client.multi_get(keys), a->round, a->nodes);
  }
  const auto& mine = record ? record->members[static_cast<std::size_t>(a->node_rank)] : me;
  if (!record || mine.host != me.host || mine.nproc != me.nproc) {
    out.message = "the answer to this node's join is not readable: " + answer.substr(0, 200);
    return out;
  }
  out.kind = JoinAnswer::Kind::Round;
  out.node_rank = a->node_rank;
  out.round = std::move(*record);
  return out;
}

// After the rendezvous: wait for the attempt's stop notice a lease interval at a time, refresh
// the lease in between; reconnect on errors until --node-timeout has passed since the last
// answer from the store host.
bool NodeLink::watch(std::unique_ptr<LinkStore>& client) {
  const auto& s = m_settings;
  const auto interval = lease_interval(s.node_timeout);
  auto last_answer = Clock::now();
  std::uint64_t beat = 0;
  int& attempt = m_watch_attempt;
  std::string lease;
  {
    const std::lock_guard lock(m_mutex);
    lease = lease_prefix(s.elastic ? m_round : -1) + std::to_string(m_node_rank);
  }
  std::string last_error;
  while (!stopping()) {
    try {
      if (!client) {
        // Short tries: stop() cannot interrupt a connect in progress, and waits for it.
        client = connect(std::min(k_reconnect_try, s.node_timeout));
        hold(client.get(), true);
      }
      if (!client->has_leases()) {
        client->set(lease, std::to_string(++beat));
      } else if (beat++ == 0) {
        client->set_leased(lease, "0", m_lease);  // goes with the node's etcd lease
      } else {
        client->keep_alive(m_lease);
      }
      if (client->wait({stop_key(attempt)}, interval)) {
        const auto value = client->get(stop_key(attempt));
        last_answer = Clock::now();
        auto notice = decode_notice(value);
        const bool next_round = notice && notice->kind == StopKind::Membership;
        if (notice) {
          post([this, attempt, n = std::move(*notice)]() mutable { m_handlers.notice(attempt, std::move(n)); });
        } else {
          spdlog::error("the stop notice of attempt {} is not readable; ignoring it", attempt);
        }
        ++attempt;
        if (next_round) return true;
      } else {
        last_answer = Clock::now();
      }
    } catch (const rdzv::StoreError& e) {
      hold(nullptr, true);
      client.reset();
      if (stopping()) return false;
      last_error = e.what();
      if (Clock::now() - last_answer >= s.node_timeout) {
        post([this, why = reason(last_error)] { m_handlers.store_host_lost(why); });
        return false;
      }
    }
  }
  return false;
}

void NodeLink::enqueue(std::function<void(LinkStore&)> command, bool before_rendezvous) {
  {
    const std::lock_guard lock(m_mutex);
    m_commands.push_back(Command{std::move(command), before_rendezvous});
  }
  m_wake.notify_all();
}

void NodeLink::commander_main() {
  std::unique_ptr<LinkStore> client;
  for (;;) {
    std::function<void(LinkStore&)> command;
    {
      std::unique_lock lock(m_mutex);
      m_wake.wait(lock, [this] {
        return m_stopping || (!m_commands.empty() && (m_rendezvous_done || m_commands.front().before_rendezvous));
      });
      if (m_stopping) break;
      command = std::move(m_commands.front().run);
      m_commands.pop_front();
    }
    // Two tries (the second on a fresh connection), each bounded by the client's timeouts.
    for (int attempt = 0; attempt < 2; ++attempt) {
      try {
        if (!client) {
          client = connect(std::min(k_reconnect_try, m_settings.node_timeout));
          hold(client.get(), false);
        }
        command(*client);
        break;
      } catch (const rdzv::StoreError& e) {
        hold(nullptr, false);
        client.reset();
        if (stopping()) break;
        if (attempt == 1) spdlog::warn("could not reach {}: {}", where(), reason(e.what()));
      }
    }
  }
  hold(nullptr, false);
}

void NodeLink::publish_stop(int attempt, StopNotice notice) {
  enqueue([attempt, value = encode(notice)](LinkStore& c) { c.compare_set(stop_key(attempt), "", value); });
}

void NodeLink::attempt_done(int attempt) {
  enqueue([this, attempt](LinkStore& c) { c.set(done_key(attempt, place().first), "1"); });
}

void NodeLink::ready_for(int attempt, std::function<void(std::string)> go) {
  enqueue([this, attempt, go = std::move(go)](LinkStore& c) {
    const auto& s = m_settings;
    const auto [node_rank, nnodes] = place();
    c.set(ready_key(attempt, node_rank), "1");
    std::vector<std::string> keys;
    const bool coordinator = s.etcd ? node_rank == 0 : s.coordinator;
    if (coordinator) {
      for (int i = 0; i < nnodes; ++i) keys.push_back(ready_key(attempt, i));
    } else {
      keys.push_back(open_key(attempt));
    }
    if (c.wait(keys, s.rdzv_timeout)) {
      auto opened = coordinator ? std::string() : c.get(open_key(attempt));
      post([go, opened = std::move(opened)] { go(opened); });
    } else {
      post([this, attempt] {
        m_handlers.rendezvous_failed(kExitRendezvous, "restart " + std::to_string(attempt) +
                                                          ": the nodes were not all ready within the rendezvous timeout");
      });
    }
  });
}

void NodeLink::open_attempt(int attempt, std::string value) {
  enqueue([attempt, value = std::move(value)](LinkStore& c) { c.set(open_key(attempt), value); });
}

// `done` is posted however the command ends (run, failed, or dropped at stop()): the node must
// be able to exit without the store host.
void NodeLink::post_when_done(std::function<void(LinkStore&)>& command, std::function<void()> done) {
  struct Guard {
    NodeLink* link = nullptr;
    std::function<void()> done;
    ~Guard() {
      if (done) link->post(done);
    }
  };
  auto guard = std::make_shared<Guard>();
  guard->link = this;
  guard->done = std::move(done);
  command = [guard, run = std::move(command)](LinkStore& c) { run(c); };
}

void NodeLink::publish_final(const NodeFinal& final_result, std::function<void()> done) {
  std::function<void(LinkStore&)> command = [this, value = encode(final_result)](LinkStore& c) {
    c.set(final_key(place().first), value);
  };
  post_when_done(command, std::move(done));
  enqueue(std::move(command));
}

void NodeLink::abort_rendezvous(const std::string& message, std::function<void()> done) {
  std::function<void(LinkStore&)> command = [message](LinkStore& c) {
    c.compare_set(k_complete_key, "", "abort\n" + message);
  };
  post_when_done(command, std::move(done));
  enqueue(std::move(command), true);
}

}  // namespace rankrun::launcher::cluster
