#include "launcher/rdzv/store_backends.hpp"

#include <spdlog/spdlog.h>

namespace rankrun::launcher::rdzv {

using Clock = std::chrono::steady_clock;

StoreBackend::~StoreBackend() {
  auto* store = m_side.store();
  if (!store) return;
  if (m_leases) store->remove_observer(m_leases.get());
  if (m_rounds) store->remove_observer(m_rounds.get());
}

std::string StoreBackend::role(int) const { return coordinates() ? " (this node hosts the store)" : ""; }

std::string StoreBackend::where() const {
  return "the store host " + m_config.master_addr + ":" + std::to_string(workers_port());
}

void StoreBackend::coordinate() {
  auto* store = m_side.store();
  if (!store) return;
  m_round_keys = cluster::store_keys(*store);
  make_leases();
  store->add_observer(m_leases.get());
}

std::optional<std::string> StoreBackend::agent_value(const std::string& key) const {
  const auto* store = m_side.store();
  if (!store) return std::nullopt;
  const auto space = store->find_key_space(cluster::k_agents_key_space);
  if (!space) return std::nullopt;
  const auto value = store->state(*space).value(key);
  if (!value) return std::nullopt;
  return std::string(*value);
}

void StoreBackend::on_node_lost(int node_rank) {
  if (!m_map || static_cast<std::size_t>(node_rank) >= m_map->nodes.size()) return;
  const auto& node = m_map->nodes[static_cast<std::size_t>(node_rank)];
  if (m_rounds && m_rounds->keeper().rejoined(node_rank)) {
    spdlog::debug("node {} ({}) let its lease of the round before lapse: it has joined the next round", node_rank, node.host);
    return;
  }
  spdlog::error("node {} ({}, {}) is lost: no lease for {} s (--node-timeout)", node_rank, node.host, cluster::ranks_of(node),
                m_config.node_timeout);
  if (finished()) return;
  if (m_rounds) {
    // Elastic: the round ends, a new one forms without it (RoundHost's restart hook).
    m_rounds->lost(node_rank);
    return;
  }
  cluster::StopNotice n;
  n.kind = cluster::StopKind::NodeLost;
  n.node_rank = node_rank;
  n.host = node.host;
  n.ranks = cluster::ranks_of(node);
  m_link->publish_stop(m_side.attempt(), n);
}

void StoreBackend::log_start() const {
  spdlog::info("node {} of {}: rendezvous at {}:{}", m_config.node_rank, m_config.nnodes, m_config.master_addr, workers_port());
}

void StoreBackend::formed_here(int round, int nodes) {
  if (!m_leases) return;
  m_leases->set_self(m_node_rank);  // this node hosts the store: its own lease proves nothing
  if (round >= 0) {
    m_leases->start_round(nodes, cluster::lease_prefix(round));
  } else {
    m_leases->start();
  }
}

void StoreBackend::abort_waiting(int signo, std::function<void()> done) {
  // Every node waits for the same rendezvous: they all hear why it ends.
  m_link->abort_rendezvous("rankrun on node " + std::to_string(m_node_rank) + " received " + signal_name(signo), std::move(done));
}

// Before any worker exists (a failed rendezvous, a signal during it): node 0 keeps serving a
// moment, until the other nodes have read how the rendezvous ended and hung up (at most
// k_linger), so that they report the same cause and not a lost store.
void StoreBackend::leave_early(std::function<void()> shut_down) {
  m_shut_down = std::move(shut_down);
  if (!coordinates() || !m_link) {
    this->shut_down();
    return;
  }
  m_link->stop();
  linger(Clock::now() + k_linger);
}

void StoreBackend::linger(Clock::time_point deadline) {
  auto* store = m_side.store();
  const auto space = store->find_key_space(cluster::k_agents_key_space);
  if (!space || store->connection_count(*space) == 0 || Clock::now() >= deadline) {
    shut_down();
    return;
  }
  m_timer.expires_after(std::chrono::milliseconds(20));
  m_timer.async_wait([this, deadline](boost::system::error_code ec) {
    if (!ec) linger(deadline);
  });
}

void C10dBackend::coordinate() {
  StoreBackend::coordinate();
  if (!m_round_keys) return;
  make_rounds(*m_round_keys, nullptr);
  m_side.store()->add_observer(m_rounds.get());
}

void C10dBackend::log_start() const {
  spdlog::info("elastic rendezvous at {}:{} ({}), {} to {} nodes", m_config.master_addr, workers_port(),
               coordinates() ? "hosted here" : "hosted there", m_config.min_nodes, m_config.nnodes);
}

void C10dBackend::abort_waiting(int signo, std::function<void()> done) {
  // A waiting node leaves alone; the store host tells every waiting node.
  if (m_rounds) m_rounds->close_job("rankrun on the store host received " + signal_name(signo), !m_map);
  done();
}

// The store host, once every node's result is in: the waiting nodes (spares, late ones) were
// just told that the rendezvous is closed; the store serves until they have read it and hung
// up (at most k_linger), so that they exit 119 and not as if the store host was lost.
void C10dBackend::serve_last_answers() {
  if (!m_rounds) {
    shut_down();
    return;
  }
  m_link->stop();
  linger(Clock::now() + k_linger);
}

}  // namespace rankrun::launcher::rdzv
