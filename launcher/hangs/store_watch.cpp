#include "launcher/hangs/store_watch.hpp"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <map>
#include <spdlog/spdlog.h>

#include "launcher/config/options.hpp"
#include "rankrun/store_keys.hpp"
#include "rendezvous/port_owner.hpp"

namespace rankrun::launcher {

namespace {
// A resolution waits until no connection has opened for k_quiet (a burst is mapped once, after
// it), but no pending connection waits longer than k_max_wait; between two resolutions there
// is at least ten times what the last one cost.
constexpr auto k_quiet = std::chrono::milliseconds(20);
constexpr auto k_max_wait = std::chrono::milliseconds(1000);
constexpr auto k_min_gap = std::chrono::milliseconds(10);
constexpr int k_cost_factor = 10;
// How often the event loop looks whether the scan on its own thread is done.
constexpr auto k_scan_poll = std::chrono::milliseconds(20);
// A connection's registrations are a few keys (gloo: two per process group); more, while it is
// not mapped yet, are not kept.
constexpr std::size_t k_max_pending_registrations = 16;
}  // namespace

void StoreWatch::Seen::merge(const Seen& other) {
  arrival = std::max(arrival, other.arrival);
  if (other.last_seq > last_seq) {
    last_seq = other.last_seq;
    last_key = other.last_key;
  }
}

StoreWatch::StoreWatch(boost::asio::io_context& io, std::uint16_t server_port, int first_rank, Listener listener)
    : m_timer(io),
      m_scan_timer(io),
      m_server_port(server_port),
      m_first_rank(first_rank),
      m_listener(std::move(listener)) {}

StoreWatch::~StoreWatch() { abandon_background(); }

void StoreWatch::start_attempt(std::vector<pid_t> pids) {
  m_ranks.assign(pids.size(), Seen{});
  m_unmatched = {};
  m_step.assign(pids.size(), -1);
  m_pids = std::move(pids);
  std::vector<int> ranks;
  for (std::size_t local = 0; local < m_pids.size(); ++local) ranks.push_back(m_first_rank + static_cast<int>(local));
  m_claims = RankClaims(std::move(ranks));
  // Connections of the attempt before are closed by the store; any left count as unknown.
  for (auto& [id, c] : m_connections) c.rank = k_unknown;
  m_pending.clear();
}

std::vector<Arrival> StoreWatch::arrivals() {
  resolve_now();
  std::vector<Arrival> out;
  for (const auto& r : m_ranks) out.push_back(r.arrival);
  return out;
}

std::optional<DuplicateRank> StoreWatch::duplicate_rank() {
  resolve_now();
  return m_claims.duplicate();
}

UnmatchedConnections StoreWatch::unmatched() const {
  auto out = m_unmatched;
  // Mapped as gone, their close not seen yet: the report may come between the two (the rank that
  // failed and the one that left early exited together).
  for (const auto& [id, c] : m_connections) {
    if (c.rank == k_gone) ++(c.seen.arrival == Arrival::Rendezvoused ? out.rendezvoused : out.connected);
  }
  return out;
}

void StoreWatch::registered(int local_rank, std::string_view key) {
  const auto found = m_claims.on_set(local_rank, key);
  if (!found) return;
  const auto pid = [this](int local) {
    return local >= 0 && static_cast<std::size_t>(local) < m_pids.size()
               ? static_cast<long>(m_pids[static_cast<std::size_t>(local)])
               : -1L;
  };
  spdlog::error("{}", describe_duplicate(*found, pid(found->first), pid(found->second)));
}

std::string StoreWatch::last_key(int local_rank) {
  resolve_now();
  return local_rank >= 0 && static_cast<std::size_t>(local_rank) < m_ranks.size()
             ? m_ranks[static_cast<std::size_t>(local_rank)].last_key
             : std::string();
}

void StoreWatch::heartbeat_value(int local_rank, std::int64_t step) {
  if (local_rank < 0 || static_cast<std::size_t>(local_rank) >= m_step.size()) return;
  auto& last = m_step[static_cast<std::size_t>(local_rank)];
  if (step == last) return;
  last = step;
  if (m_listener) m_listener(local_rank, StoreEvent::Progress);
}

int StoreWatch::local_rank_in_key(std::string_view key, std::string_view prefix) const {
  const auto global = rankrun::rank_in_key(key, prefix);
  if (!global) return -1;
  const int local = *global - m_first_rank;
  return local >= 0 && static_cast<std::size_t>(local) < m_ranks.size() ? local : -1;
}

StoreWatch::Seen* StoreWatch::seen_by(Connection& c) {
  if (c.rank == k_pending || c.rank == k_gone) return &c.seen;
  if (c.rank >= 0 && static_cast<std::size_t>(c.rank) < m_ranks.size())
    return &m_ranks[static_cast<std::size_t>(c.rank)];
  return nullptr;
}

void StoreWatch::on_open(std::uint64_t conn, const std::string& peer_ip, std::uint16_t peer_port, std::uint16_t) {
  auto& c = m_connections[conn];
  c.peer_ip = rendezvous::canonical_ip(peer_ip);
  c.peer_port = peer_port;
  c.seen.arrival = Arrival::Connected;
  const auto now = std::chrono::steady_clock::now();
  if (m_pending.empty()) m_oldest_pending = now;
  m_last_open = now;
  m_pending.push_back(conn);
  schedule();
}

void StoreWatch::on_close(std::uint64_t conn) {
  const auto it = m_connections.find(conn);
  if (it == m_connections.end()) return;
  // Gone before it was mapped: its rank cannot be told any more (its process has closed it). A
  // worker's of this host when it came over loopback, as a single node's workers do; another
  // node's workers' connections to node 0 are not this node's ranks. One mapped as k_gone
  // came over loopback.
  const auto& c = it->second;
  if ((c.rank == k_pending && is_loopback_address(c.peer_ip)) || c.rank == k_gone) {
    ++(c.seen.arrival == Arrival::Rendezvoused ? m_unmatched.rendezvoused : m_unmatched.connected);
  }
  m_connections.erase(it);
}

void StoreWatch::on_request(std::uint64_t conn, rendezvous::Op op, std::string_view first_key) {
  if (spdlog::should_log(spdlog::level::trace)) {
    spdlog::trace("store: connection {} {} {}", conn, rendezvous::op_name(op), first_key);
  }
  // The worker runtime's keys name their rank.
  if (op == rendezvous::Op::Set && m_listener) {
    if (const int r = local_rank_in_key(first_key, rankrun::k_heartbeat_prefix); r >= 0)
      m_listener(r, StoreEvent::Heartbeat);
    if (const int r = local_rank_in_key(first_key, rankrun::k_collective_prefix); r >= 0)
      m_listener(r, StoreEvent::Progress);
  }
  const auto it = m_connections.find(conn);
  if (it == m_connections.end()) return;
  Seen* seen = seen_by(it->second);
  if (!seen) return;
  if (op == rendezvous::Op::Set && rank_registration(first_key)) {
    auto& c = it->second;
    if (c.rank >= 0) {
      registered(c.rank, first_key);
    } else if (c.registrations.size() < k_max_pending_registrations) {
      c.registrations.emplace_back(first_key);
    }
  }
  if (!first_key.empty()) {
    seen->last_seq = ++m_seq;
    seen->last_key.assign(first_key);
  }
  // torch's TCPStore client ADDs the raw key "init/" when it joins with a world size: that is
  // init_process_group's rendezvous.
  if (op == rendezvous::Op::Add && first_key == "init/" && seen->arrival != Arrival::Rendezvoused) {
    seen->arrival = Arrival::Rendezvoused;
    if (it->second.rank >= 0 && m_listener) m_listener(it->second.rank, StoreEvent::Rendezvous);
  }
}

void StoreWatch::stop() {
  m_stopped = true;
  m_timer.cancel();
  abandon_background();
}

void StoreWatch::schedule() {
  if (m_stopped || m_scheduled || m_pending.empty()) return;
  m_scheduled = true;
  const auto due = std::max(std::min(m_last_open + k_quiet, m_oldest_pending + k_max_wait), m_next_allowed);
  m_timer.expires_at(due);
  m_timer.async_wait([this](boost::system::error_code ec) {
    m_scheduled = false;
    if (ec || m_stopped || m_pending.empty()) return;
    const auto now = std::chrono::steady_clock::now();
    if (now < m_last_open + k_quiet && now < m_oldest_pending + k_max_wait) {
      schedule();  // connections are still arriving
      return;
    }
    if (m_scan.joinable()) return;  // the scan in flight schedules the next when it is done
    resolve_in_background();
  });
}

StoreWatch::Mapping StoreWatch::read_mapping(std::uint16_t server_port, const std::vector<pid_t>& pids) {
  Mapping m;
  for (const auto& e : rendezvous::read_tcp_sockets()) {
    if (e.remote_port == server_port && e.inode != 0) m.inode_of[{e.local_ip, e.local_port}] = e.inode;
  }
  m.read = true;
  for (std::size_t rank = 0; rank < pids.size(); ++rank) {
    const auto inodes = rendezvous::held_socket_inodes(pids[rank]);
    if (!inodes) {
      m.gone.push_back(static_cast<int>(rank));
      continue;
    }
    for (const auto inode : *inodes) m.rank_of_inode.emplace(inode, static_cast<int>(rank));
  }
  return m;
}

void StoreWatch::resolve_in_background() {
  m_scanning = std::move(m_pending);
  m_pending.clear();
  auto background = std::make_shared<Background>();
  background->began = std::chrono::steady_clock::now();
  m_background = background;
  // The thread touches nothing but what it owns: it may outlive this watch (detached when the
  // job ends before it is done), and the event loop polls for its result.
  m_scan = std::thread([background, port = m_server_port, pids = m_pids] {
    // The scan yields to everything else: reading /proc/net/tcp is kernel work charged to this
    // thread, and under a burst the store's event loop needs the cores (on 2 cores, a scan at
    // normal priority in the middle of a 16,384-client barrier overflowed the accept queue).
    sched_param idle{};
    ::pthread_setschedparam(::pthread_self(), SCHED_IDLE, &idle);
    Mapping mapping;
    try {
      mapping = read_mapping(port, pids);
    } catch (const std::exception&) {
      // the connections stay unknown
    }
    std::lock_guard<std::mutex> lock(background->mutex);
    background->result = std::move(mapping);
    background->done = true;
  });
  poll_background();
}

void StoreWatch::poll_background() {
  m_scan_timer.expires_after(k_scan_poll);
  m_scan_timer.async_wait([this](boost::system::error_code ec) {
    if (ec || !m_scan.joinable()) return;
    std::optional<Mapping> result;
    {
      std::lock_guard<std::mutex> lock(m_background->mutex);
      if (!m_background->done) {
        poll_background();
        return;
      }
      result.swap(m_background->result);
    }
    m_scan.join();  // done: returns at once
    auto batch = std::move(m_scanning);
    m_scanning.clear();
    if (result) apply(*result, batch, std::chrono::steady_clock::now() - m_background->began);
    schedule();  // connections that opened meanwhile
  });
}

void StoreWatch::abandon_background() {
  m_scan_timer.cancel();
  if (!m_scan.joinable()) return;
  bool done = false;
  {
    std::lock_guard<std::mutex> lock(m_background->mutex);
    done = m_background->done;
  }
  // A scan at idle priority on a busy machine may take long: the watch does not wait for it.
  if (done) {
    m_scan.join();
  } else {
    m_scan.detach();
  }
  // Its connections are pending again (a report maps them now, on the spot).
  m_pending.insert(m_pending.begin(), m_scanning.begin(), m_scanning.end());
  m_scanning.clear();
}

void StoreWatch::resolve_now() {
  abandon_background();
  if (m_pending.empty()) return;
  const auto began = std::chrono::steady_clock::now();
  const Mapping mapping = read_mapping(m_server_port, m_pids);
  auto batch = std::move(m_pending);
  m_pending.clear();
  apply(mapping, batch, std::chrono::steady_clock::now() - began);
}

void StoreWatch::apply(const Mapping& mapping, const std::vector<std::uint64_t>& batch,
                       std::chrono::steady_clock::duration cost) {
  std::vector<std::pair<int, StoreEvent>> events;
  std::vector<Connection*> unowned;
  for (const auto conn : batch) {
    const auto it = m_connections.find(conn);
    if (it == m_connections.end() || it->second.rank != k_pending) continue;
    auto& c = it->second;
    c.rank = owner_of_connection(mapping, c.peer_ip, c.peer_port, false);
    spdlog::debug("store: connection {} from {}:{} is local rank {}", conn, c.peer_ip, c.peer_port, c.rank);
    if (c.rank < 0) {
      unowned.push_back(&c);
      continue;
    }
    auto& seen = m_ranks[static_cast<std::size_t>(c.rank)];
    const bool was_rendezvoused = seen.arrival == Arrival::Rendezvoused;
    seen.merge(c.seen);
    if (!was_rendezvoused && seen.arrival == Arrival::Rendezvoused) events.emplace_back(c.rank, StoreEvent::Rendezvous);
    for (const auto& key : c.registrations) registered(c.rank, key);
    c.registrations.clear();
  }
  // A connection no worker holds may be one of an exited rank's that no connection was matched to.
  const bool unmatched_rank_gone = std::any_of(mapping.gone.begin(), mapping.gone.end(), [this](int r) {
    return r >= 0 && static_cast<std::size_t>(r) < m_ranks.size() &&
           m_ranks[static_cast<std::size_t>(r)].arrival == Arrival::NeverConnected;
  });
  for (Connection* c : unowned) c->rank = owner_of_connection(mapping, c->peer_ip, c->peer_port, unmatched_rank_gone);
  m_next_allowed =
      std::chrono::steady_clock::now() + std::max<std::chrono::steady_clock::duration>(k_min_gap, cost * k_cost_factor);
  for (const auto& [rank, event] : events) {
    if (m_listener) m_listener(rank, event);
  }
}

}  // namespace rankrun::launcher
