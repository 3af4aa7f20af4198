#include "launcher/cluster/node_link.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <optional>
#include <boost/asio/post.hpp>
#include <random>
#include <variant>
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
// At exit (revoking the node's lease, where the store has them): one short try, the lease lapses
// anyway.
constexpr milliseconds k_revoke_try{200};
// The pauses between a command's tries: doubling from the first up to the last.
constexpr milliseconds k_retry_first_pause{50};
constexpr milliseconds k_retry_max_pause{1000};

double seconds_left(Clock::time_point deadline) {
  return std::chrono::duration<double>(deadline - Clock::now()).count();
}

std::string make_instance() {
  std::random_device rd;
  return std::to_string(::getpid()) + "-" + std::to_string(rd()) + std::to_string(rd());
}

// What a waiting node prints.
void warn(const std::string& line) { spdlog::warn("{}", line); }

}  // namespace

NodeLink::NodeLink(boost::asio::io_context& io, LinkSettings settings, LinkHandlers handlers)
    : m_io(io),
      m_settings(std::move(settings)),
      m_handlers(std::move(handlers)),
      m_instance(make_instance()),
      m_alive(std::make_shared<bool>(true)),
      m_cancel(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)),
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
    // A connect in progress (a client not yet held) gives up too.
    const std::uint64_t one = 1;
    [[maybe_unused]] const auto n = ::write(m_cancel.get(), &one, sizeof one);
    if (m_watcher_client) m_watcher_client->interrupt();
    if (m_commander_client) m_commander_client->interrupt();
  }
  *m_alive = false;
  m_wake.notify_all();
  const auto began = Clock::now();
  if (m_watcher.joinable()) m_watcher.join();
  if (m_commander.joinable()) m_commander.join();
  spdlog::debug("link to {} closed in {} ms", where(),
                std::chrono::duration_cast<milliseconds>(Clock::now() - began).count());
  // Where the store has leases: the node's keys (its join, its lease key) go now rather than
  // when the lease lapses; the coordinator sees a waiting node leave, or a member that sent its
  // result go.
  if (m_lease != 0) {
    const auto lease = std::exchange(m_lease, 0);
    try {
      connect(std::min(k_revoke_try, m_settings.node_timeout), false)->revoke(lease);
    } catch (const rdzv::StoreError&) {
    }
  }
}

bool NodeLink::stopping() const {
  const std::lock_guard lock(m_mutex);
  return m_stopping;
}

void NodeLink::set_interruptible(Side side, LinkStore* client) {
  const std::lock_guard lock(m_mutex);
  (side == Side::Watcher ? m_watcher_client : m_commander_client) = client;
  if (client && m_stopping) client->interrupt();
}

void NodeLink::post(std::function<void()> fn) {
  boost::asio::post(m_io, [alive = m_alive, fn = std::move(fn)] {
    if (*alive) fn();
  });
}

void NodeLink::fail(RendezvousFailure failure) {
  post([this, failure = std::move(failure)] { m_handlers.rendezvous_failed(failure.end, failure.message); });
}

std::unique_ptr<LinkStore> NodeLink::connect(milliseconds connect_timeout, bool cancellable) {
  LinkConnect how;
  how.connect_timeout = connect_timeout;
  // A reply that does not come within a third of the node timeout means the link is gone.
  how.reply_timeout = cluster::reply_timeout(m_settings.node_timeout);
  how.cancel_fd = cancellable ? m_cancel.get() : -1;
  return m_settings.channel.connect(how);
}

std::string NodeLink::reason(std::string what) const {
  // The client names the endpoint itself: the messages that use this already do.
  return without_endpoint(std::move(what), where());
}

bool NodeLink::denied(const rdzv::StoreError& e) const {
  return m_settings.channel.denied && m_settings.channel.denied(e);
}

std::int64_t NodeLink::node_lease(LinkStore& client) {
  if (!client.has_leases()) return 0;
  const auto lease = renew_or_grant(client, m_lease, m_settings.node_timeout);
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
      if (denied(e)) {
        // Nor can it here: the endpoint refused this node's certificate, password or
        // permissions, or its certificate failed verification.
        post([this, why = reason(e.what())] {
          m_handlers.rendezvous_failed(EarlyEnd::RendezvousFailed, "cannot use " + where() + ": " + why);
        });
        return nullptr;
      }
      if (auto refused = m_settings.channel.refusal ? m_settings.channel.refusal(e) : std::nullopt) {
        // The endpoint will not have this node, or what listens there is something else:
        // waiting cannot help either.
        post([this, message = std::move(*refused)] {
          m_handlers.rendezvous_failed(EarlyEnd::RendezvousFailed, message);
        });
        return nullptr;
      }
      const bool first_try = try_for == k_rdzv_first_try;
      try_for = k_rdzv_connect_try;
      // "cannot connect to the store at H:P within N ms: Connection refused" -> the system's words.
      std::string why = reason(e.what());
      if (const auto at = why.find(" ms: "); at != std::string::npos) why = why.substr(at + 5);
      if (Clock::now() >= deadline) {
        post([this, why] {
          const bool elastic = m_settings.elastic;
          m_handlers.rendezvous_failed(EarlyEnd::RendezvousFailed,
                                       "could not reach " + where() + " within " +
                                           (elastic ? "join_timeout (" : "the rendezvous timeout (") +
                                           std::to_string(m_settings.rdzv_timeout.count() / 1000) + " s): " + why +
                                           m_settings.channel.unreachable_hint);
        });
        return nullptr;
      }
      if (why.rfind("handshake failed", 0) == 0 && why.find("no reply") != std::string::npos) {
        // The host answered TCP: over a slow link the store's answer may just need longer than
        // what was left of the short first try. The longer tries tell.
        if (first_try) continue;
        why += " (something accepts connections there but does not answer as a store: is the port right?)";
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
  const NodeRecord me{s.node_rank, s.local_addr.empty() ? client.local_address() : s.local_addr, s.nproc, s.run_id,
                      m_instance};
  auto result = static_rendezvous(
      client, me, s.nnodes, s.rdzv_timeout, [this] { return stopping(); }, warn);
  if (std::holds_alternative<Stopped>(result)) return false;
  if (auto* failure = std::get_if<RendezvousFailure>(&result)) {
    fail(std::move(*failure));
    return false;
  }
  post([this, map = std::get<NodeMap>(std::move(result)), node_rank = s.node_rank, host = me.host]() mutable {
    m_handlers.rendezvous_done(std::move(map), node_rank, host, -1);
  });
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
  set_interruptible(Side::Watcher, client.get());
  try {
    if (!(m_settings.elastic ? join_round(client) : rendezvous(*client))) {
      set_interruptible(Side::Watcher, nullptr);
      return;
    }
  } catch (const rdzv::StoreError& e) {
    set_interruptible(Side::Watcher, nullptr);
    if (stopping()) return;
    const bool refused = denied(e);
    post([this, refused, why = reason(e.what())] {
      m_handlers.rendezvous_failed(EarlyEnd::RendezvousFailed, (refused ? "cannot use " : "lost ") + where() +
                                                                   (refused ? ": " : " during the rendezvous: ") + why);
    });
    return;
  }
  // Elastic: each membership change ends the round; the node joins the next one once the Job
  // has stopped its workers (rejoin()).
  while (watch(client)) {
    try {
      // While this node stops its workers its lease must not lapse: it would be lost (a lease
      // of the store's), or look lost to the coordinator, which times the round's leases until
      // it rejoins too.
      for (;;) {
        {
          std::unique_lock lock(m_mutex);
          m_wake.wait_for(lock, lease_interval(m_settings.node_timeout), [this] { return m_stopping || m_rejoin; });
          if (m_stopping || m_rejoin) break;
        }
        try {
          if (!client) {
            client = connect(reconnect_try(m_settings.node_timeout, m_settings.node_timeout));
            set_interruptible(Side::Watcher, client.get());
          }
          if (m_lease != 0) {
            client->keep_alive(m_lease);
          } else {
            refresh_lease(*client, m_round_lease);
          }
        } catch (const rdzv::StoreError&) {
          // Tried again next interval; the join that follows reports an endpoint that stays away.
          set_interruptible(Side::Watcher, nullptr);
          client.reset();
        }
      }
      {
        const std::lock_guard lock(m_mutex);
        if (m_stopping) break;
        m_rejoin = false;
      }
      if (!join_round(client)) break;
    } catch (const rdzv::StoreError& e) {
      if (stopping()) break;
      post([this, why = reason(e.what())] { m_handlers.lost(why); });
      break;
    }
  }
  set_interruptible(Side::Watcher, nullptr);
}

// Elastic: ask the coordinator for a round and wait for its answer, printing the waiting line
// it keeps (rdzv/status) when it changes and every few seconds. A spare waits without limit:
// the coordinator tells it when it may join, or that the job is over.
// A connection lost meanwhile is replaced and the join tried again, until --node-timeout has
// passed since the endpoint last answered; then StoreError goes to the caller.
bool NodeLink::join_round(std::unique_ptr<LinkStore>& client) {
  const auto& s = m_settings;
  const auto [previous_rank, unused] = place();
  (void)unused;
  JoinState state;
  std::optional<NodeRecord> me;
  JoinAnswer answer;
  auto last_answer = Clock::now();
  for (;;) {
    try {
      if (!client) {
        const auto since = std::chrono::duration_cast<milliseconds>(Clock::now() - last_answer);
        client = connect(reconnect_try(s.node_timeout, s.node_timeout - since));
        set_interruptible(Side::Watcher, client.get());
      }
      if (!me) {
        me = NodeRecord{previous_rank, s.local_addr.empty() ? client->local_address() : s.local_addr, s.nproc, s.run_id,
                        m_instance};
      }
      const auto lease = node_lease(*client);
      JoinProgress progress(m_instance, lease, lease_interval(s.node_timeout));
      answer = cluster::join_round(
          *client, *me,
          [&](LinkStore& c) {
            if (stopping()) return false;
            last_answer = Clock::now();
            progress.step(c, warn);
            return true;
          },
          progress.poll(), lease, state);
      break;
    } catch (const rdzv::StoreError& e) {
      set_interruptible(Side::Watcher, nullptr);
      client.reset();
      if (stopping()) return false;
      // The endpoint refused something no retry changes (a permission of the user's, a
      // certificate).
      if (denied(e)) throw;
      if (Clock::now() - last_answer >= s.node_timeout) throw;
      spdlog::debug("joining the round again on a new connection: {}", reason(e.what()));
      std::unique_lock lock(m_mutex);
      if (m_wake.wait_for(lock, k_retry_first_pause, [this] { return m_stopping; })) return false;
    }
  }
  if (stopping()) return false;
  auto joined = joined_round(answer);
  if (auto* failure = std::get_if<RendezvousFailure>(&joined)) {
    fail(std::move(*failure));
    return false;
  }
  auto& round = std::get<JoinedRound>(joined);
  {
    const std::lock_guard lock(m_mutex);
    m_node_rank = round.node_rank;
    m_nnodes = static_cast<int>(answer.round.members.size());
    m_round = round.round;
    m_watch_attempt = attempt_id(round.round, 0);
    m_rendezvous_done = true;
  }
  m_wake.notify_all();
  post([this, map = std::move(round.map), node_rank = round.node_rank, host = me->host, r = round.round]() mutable {
    m_handlers.rendezvous_done(std::move(map), node_rank, host, r);
  });
  return true;
}

// After the rendezvous: wait for the attempt's stop notice a lease interval at a time, refresh
// the lease in between; reconnect on errors until --node-timeout has passed since the last
// answer from the endpoint.
bool NodeLink::watch(std::unique_ptr<LinkStore>& client) {
  const auto& s = m_settings;
  const auto interval = lease_interval(s.node_timeout);
  auto last_answer = Clock::now();
  int& attempt = m_watch_attempt;
  NodeLease& lease = m_round_lease;
  lease = NodeLease{};
  {
    const std::lock_guard lock(m_mutex);
    lease.key = lease_prefix(s.elastic ? m_round : -1) + std::to_string(m_node_rank);
  }
  lease.granted = m_lease;
  std::string last_error;
  while (!stopping()) {
    try {
      if (!client) {
        // A try as long as a reply may take (a slow link's two round trips must fit), no
        // longer, and not past --node-timeout: stop() cannot interrupt a connect in progress.
        const auto since = std::chrono::duration_cast<milliseconds>(Clock::now() - last_answer);
        client = connect(reconnect_try(s.node_timeout, s.node_timeout - since));
        set_interruptible(Side::Watcher, client.get());
      }
      auto seen = watch_interval(*client, lease, attempt, interval);
      last_answer = Clock::now();
      if (seen.published) {
        const bool next_round = seen.notice && seen.notice->kind == StopKind::Membership;
        if (seen.notice) {
          post([this, attempt, n = std::move(*seen.notice)]() mutable { m_handlers.notice(attempt, std::move(n)); });
        } else {
          spdlog::error("the stop notice of attempt {} is not readable; ignoring it", attempt);
        }
        ++attempt;
        if (next_round) return true;
      }
    } catch (const rdzv::StoreError& e) {
      set_interruptible(Side::Watcher, nullptr);
      client.reset();
      if (stopping()) return false;
      last_error = e.what();
      // The endpoint refused this node (its user's role revoked, the user removed): no retry
      // changes that, so the node does not wait --node-timeout for it.
      if (Clock::now() - last_answer >= s.node_timeout || denied(e)) {
        post([this, why = reason(last_error)] { m_handlers.lost(why); });
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
    deliver(command, client);
  }
  set_interruptible(Side::Commands, nullptr);
}

// A command that matters (a stop notice, "done", "ready", a result) is not dropped on a short
// fault: it is tried again on a fresh connection, a pause apart, until --node-timeout has passed
// since its first try. By then the watcher, which cannot reach the same endpoint either, has
// called it lost. Each connect lasts no longer than a reply may: stop() cannot interrupt one
// in progress.
bool NodeLink::run_queued(LinkStore& client) {
  for (;;) {
    std::function<void(LinkStore&)> command;
    {
      const std::lock_guard lock(m_mutex);
      if (m_stopping) return false;
      if (m_commands.empty()) return true;
      command = m_commands.front().run;
    }
    command(client);  // a failure leaves it queued: the barrier is tried again, then it
    const std::lock_guard lock(m_mutex);
    if (!m_commands.empty()) m_commands.pop_front();
  }
}

void NodeLink::deliver(const std::function<void(LinkStore&)>& command, std::unique_ptr<LinkStore>& client) {
  // --node-timeout counts from the first failure: a command may wait long (the barrier) and
  // still deserves its retries.
  std::optional<Clock::time_point> give_up;
  milliseconds pause = k_retry_first_pause;
  for (int tries = 1;; ++tries) {
    try {
      if (!client) {
        const auto left =
            give_up ? std::chrono::duration_cast<milliseconds>(*give_up - Clock::now()) : m_settings.node_timeout;
        client = connect(reconnect_try(m_settings.node_timeout, left));
        set_interruptible(Side::Commands, client.get());
      }
      command(*client);
      if (tries > 2) spdlog::info("reached {} again after {} tries", where(), tries);
      return;
    } catch (const rdzv::StoreError& e) {
      set_interruptible(Side::Commands, nullptr);
      client.reset();
      if (stopping()) return;
      if (!give_up) give_up = Clock::now() + m_settings.node_timeout;
      if (Clock::now() + pause >= *give_up) {
        spdlog::error(
            "could not reach {} for {} s (--node-timeout), {} tries: {}; a message of this node's was not "
            "delivered",
            where(), m_settings.node_timeout.count() / 1000.0, tries, reason(e.what()));
        return;
      }
      if (tries == 2)
        spdlog::warn("could not reach {}: {}; trying again until --node-timeout", where(), reason(e.what()));
    }
    std::unique_lock lock(m_mutex);
    if (m_wake.wait_for(lock, pause, [this] { return m_stopping; })) return;
    pause = std::min(pause * 2, k_retry_max_pause);
  }
}

void NodeLink::publish_stop(int attempt, StopNotice notice) {
  enqueue([attempt, notice = std::move(notice)](LinkStore& c) { cluster::publish_stop(c, attempt, notice); });
}

void NodeLink::share_progress(int attempt, std::string progress, int nodes,
                              std::function<void(std::vector<NodeProgress>)> every_node) {
  {
    const std::lock_guard lock(m_mutex);
    const bool waiting = m_progress.has_value();
    m_progress = SharedProgress{attempt, std::move(progress), nodes, std::move(every_node)};
    if (waiting) return;
  }
  enqueue([this](LinkStore& c) {
    std::optional<SharedProgress> p;
    {
      const std::lock_guard lock(m_mutex);
      p = std::exchange(m_progress, std::nullopt);
    }
    if (!p) return;  // sent already (a command tried again)
    c.set(progress_key(p->attempt, place().first), p->text);
    if (!p->every_node) return;
    // The nodes that have said anything in this attempt (a node that has not looked yet has no key).
    std::vector<std::string> keys;
    for (int node = 0; node < p->nodes; ++node) keys.push_back(progress_key(p->attempt, node));
    std::vector<std::string> present;
    if (c.check(keys)) {
      present = keys;
    } else {
      for (const auto& key : keys) {
        if (c.check({key})) present.push_back(key);
      }
    }
    std::vector<NodeProgress> heard;
    if (!present.empty()) {
      for (const auto& text : c.multi_get(present)) {
        auto decoded = decode_progress(text);
        if (decoded && decoded->attempt == p->attempt) heard.push_back(std::move(*decoded));
      }
    }
    post([every_node = std::move(p->every_node), heard = std::move(heard)]() mutable { every_node(std::move(heard)); });
  });
}

void NodeLink::attempt_done(int attempt) {
  enqueue([this, attempt](LinkStore& c) { cluster::attempt_done(c, attempt, place().first); });
}

void NodeLink::ready_for(int attempt, std::function<void(std::string)> go) {
  enqueue([this, attempt, go = std::move(go)](LinkStore& c) {
    const auto& s = m_settings;
    const auto [node_rank, nnodes] = place();
    const bool coordinator = s.opens_attempts && s.opens_attempts(node_rank);
    // The commands that come meanwhile (the notice of a node lost at the barrier, this node's
    // stop on a signal) are sent between the barrier's slices; once the attempt's stop notice
    // is out, the barrier ends and the notice decides.
    auto ready = cluster::ready_for(c, attempt, node_rank, nnodes, coordinator, s.rdzv_timeout,
                                    [this](LinkStore& on) { return run_queued(on); });
    if (auto* opened = std::get_if<std::string>(&ready)) {
      post([go, opened = std::move(*opened)] { go(opened); });
    } else if (auto* failure = std::get_if<RendezvousFailure>(&ready)) {
      fail(std::move(*failure));
    } else {
      spdlog::debug("the barrier before attempt {} ended: the attempt was stopped", attempt);
    }
  });
}

void NodeLink::open_attempt(int attempt, std::string value) {
  enqueue([attempt, value = std::move(value)](LinkStore& c) { cluster::open_attempt(c, attempt, value); });
}

// `done` is posted however the command ends (run, failed, or dropped at stop()): the node must
// be able to exit without the store host. It hears whether the command ran.
void NodeLink::post_when_done(std::function<void(LinkStore&)>& command, std::function<void(bool delivered)> done) {
  struct Guard {
    NodeLink* link = nullptr;
    std::function<void(bool)> done;
    bool delivered = false;
    ~Guard() {
      if (done) link->post([done = std::move(done), delivered = delivered] { done(delivered); });
    }
  };
  auto guard = std::make_shared<Guard>();
  guard->link = this;
  guard->done = std::move(done);
  command = [guard, run = std::move(command)](LinkStore& c) {
    run(c);
    guard->delivered = true;
  };
}

void NodeLink::publish_final(const NodeFinal& final_result, std::function<void(bool delivered)> done) {
  std::function<void(LinkStore&)> command = [this, final_result](LinkStore& c) {
    cluster::publish_final(c, place().first, final_result);
  };
  post_when_done(command, std::move(done));
  enqueue(std::move(command));
}

void NodeLink::abort_rendezvous(const std::string& message, std::function<void()> done) {
  std::function<void(LinkStore&)> command = [message](LinkStore& c) { cluster::abort_rendezvous(c, message); };
  post_when_done(command, [done = std::move(done)](bool) { done(); });
  enqueue(std::move(command), true);
}

}  // namespace rankrun::launcher::cluster
