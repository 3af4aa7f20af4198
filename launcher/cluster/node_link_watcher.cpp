// NodeLink's watcher thread: the rendezvous (static, or an elastic round), then the watch of the
// job's notices and this node's lease, reconnecting as the store host allows.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <optional>
#include <utility>
#include <variant>

#include "launcher/cluster/node_link.hpp"

namespace rankrun::launcher::cluster {
namespace {

// One connection attempt while the store host may not be up yet: short, so that an
// unreachable endpoint is reported within a second, then longer.
constexpr std::chrono::milliseconds k_rdzv_first_try{500};
constexpr std::chrono::milliseconds k_rdzv_connect_try{2000};

// What a waiting node prints.
void warn(const std::string& line) { spdlog::warn("{}", line); }

double seconds_left(std::chrono::steady_clock::time_point deadline) {
  return std::chrono::duration<double>(deadline - std::chrono::steady_clock::now()).count();
}

}  // namespace

std::unique_ptr<LinkStore> NodeLink::connect_for_rendezvous() {
  const auto deadline = Clock::now() + m_settings.rdzv_timeout;
  auto next_report = Clock::now();
  auto try_for = k_rdzv_first_try;
  while (!stopping()) {
    try {
      const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
      return connect(std::clamp(left, milliseconds(1), try_for));
    } catch (const rendezvous::StoreError& e) {
      if (denied(e)) {
        // Nor can it here: the endpoint refused this node's certificate, password or
        // permissions, or its certificate failed verification.
        post([this, why = reason(e)] {
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
      // The system's words ("Connection refused"), or the handshake's.
      std::string why = reason(e);
      if (e.stage() == rendezvous::StoreStage::Handshake && e.kind() == rendezvous::StoreFailure::NoReply) {
        // The host answered TCP: over a slow link the store's answer may just need longer than
        // what was left of the short first try. The longer tries tell.
        if (first_try && Clock::now() < deadline) continue;
        why +=
            " (something accepts connections there but does not answer: a store host that is stopped or "
            "overloaded, or another program on that port)";
      }
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
  } catch (const rendezvous::StoreError& e) {
    set_interruptible(Side::Watcher, nullptr);
    if (stopping()) return;
    const bool refused = denied(e);
    post([this, refused, why = reason(e)] {
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
          auto& store = reconnect(Side::Watcher, client, Clock::now() + m_settings.node_timeout);
          if (m_lease != 0) {
            store.keep_alive(m_lease);
          } else {
            refresh_lease(store, m_round_lease);
          }
        } catch (const rendezvous::StoreError&) {
          // Tried again next interval; the join that follows reports an endpoint that stays away.
          drop(Side::Watcher, client);
        }
      }
      {
        const std::lock_guard lock(m_mutex);
        if (m_stopping) break;
        m_rejoin = false;
      }
      if (!join_round(client)) break;
    } catch (const rendezvous::StoreError& e) {
      if (stopping()) break;
      post([this, why = reason(e)] { m_handlers.lost(why); });
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
      reconnect(Side::Watcher, client, last_answer + s.node_timeout);
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
    } catch (const rendezvous::StoreError& e) {
      drop(Side::Watcher, client);
      if (stopping()) return false;
      // The endpoint refused something no retry changes (a permission of the user's, a
      // certificate).
      if (denied(e)) throw;
      if (Clock::now() - last_answer >= s.node_timeout) throw;
      spdlog::debug("joining the round again on a new connection: {}", reason(e));
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
      auto seen =
          watch_interval(reconnect(Side::Watcher, client, last_answer + s.node_timeout), lease, attempt, interval);
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
    } catch (const rendezvous::StoreError& e) {
      drop(Side::Watcher, client);
      if (stopping()) return false;
      last_error = reason(e);
      // The endpoint refused this node (its user's role revoked, the user removed): no retry
      // changes that, so the node does not wait --node-timeout for it.
      if (Clock::now() - last_answer >= s.node_timeout || denied(e)) {
        post([this, why = last_error] { m_handlers.lost(why); });
        return false;
      }
    }
  }
  return false;
}

}  // namespace rankrun::launcher::cluster
