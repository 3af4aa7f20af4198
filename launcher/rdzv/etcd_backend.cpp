#include "launcher/rdzv/etcd_backend.hpp"

#include "base/parse_number.hpp"

#include <unistd.h>

#include <spdlog/spdlog.h>

#include "launcher/types/exit_status.hpp"
#include "launcher/host/host_facts.hpp"
#include "launcher/cluster/etcd_rounds.hpp"
#include "rendezvous/etcd_client.hpp"
#include "base/host_port.hpp"

namespace rankrun::launcher::rdzv {

cluster::LinkChannel etcd_channel(const LaunchConfig& c) {
  const auto& etcd = c.etcd_settings;
  cluster::LinkChannel channel;
  channel.where = "etcd at " + host_port(etcd.host, etcd.port);
  channel.unreachable_hint = "; check --rdzv-endpoint and that etcd runs there";
  channel.connect = [etcd, security = c.etcd_security](const cluster::LinkConnect& how) {
    rendezvous::EtcdOptions options;
    options.connect_timeout = how.connect_timeout;
    options.timeout = how.reply_timeout;
    options.user_timeout = how.reply_timeout;
    options.patience = how.patience;
    options.on_slow_reply = how.slow_reply;
    options.cancel_fd = how.cancel_fd;
    options.security = security;
    return cluster::wrap(std::make_unique<rendezvous::EtcdClient>(etcd.host, etcd.port, etcd.prefix, options));
  };
  // etcd refused this node's certificate, password or permissions, or its certificate failed
  // verification: whenever it comes, no retry changes it.
  channel.denied = [](const rendezvous::StoreError& e) { return e.kind() == rendezvous::StoreFailure::Refused; };
  return channel;
}

EtcdBackend::~EtcdBackend() {
  if (m_coordinator) m_coordinator->stop(std::chrono::milliseconds(0));
  stop_parts();
}

std::string EtcdBackend::where() const {
  return "etcd at " + m_config.etcd_settings.host + ":" + std::to_string(m_config.etcd_settings.port);
}

cluster::LinkChannel EtcdBackend::channel() const { return etcd_channel(m_config); }

std::function<bool(int)> EtcdBackend::attempt_opener() const {
  // Node rank 0 of each round hosts the workers' store, and opens its attempts.
  return [](int node_rank) { return node_rank == 0; };
}

void EtcdBackend::coordinate() {
  const auto names = local_host_names();
  const auto& etcd = m_config.etcd_settings;
  cluster::EtcdCoordinator::Settings s;
  s.host = etcd.host;
  s.port = etcd.port;
  s.prefix = etcd.prefix;
  s.security = m_config.etcd_security;
  s.connect = m_channels.etcd;
  s.node_timeout = std::chrono::milliseconds(static_cast<long long>(m_config.node_timeout * 1000));
  s.name = (names.empty() ? std::string("?") : names.front()) + " pid " + std::to_string(::getpid());
  m_coordinator = std::make_unique<cluster::EtcdCoordinator>(
      m_io, s,
      cluster::EtcdCoordinator::Hooks{[this] { on_elected(); },
                                      [this](const rendezvous::EtcdEvent& e) {
                                        if (m_rounds && m_leases) cluster::feed(e, *m_rounds, *m_leases);
                                      },
                                      [this](const std::string& why) {
                                        spdlog::error("this node stopped coordinating the rounds: {}", why);
                                        if (m_rounds) m_rounds->stop();
                                        if (m_leases) m_leases->stop();
                                      }});
  m_coordinator->start();
}

void EtcdBackend::on_elected() {
  if (finished()) return;
  make_leases();
  // The coordinator times the round's leases whether or not it is a member.
  make_rounds(*m_coordinator, [this](const cluster::RoundRecord& round) {
    m_leases->start_round(static_cast<int>(round.members.size()), cluster::lease_prefix(round.round));
  });
  cluster::take_over(*m_coordinator, *m_rounds, *m_leases);
}

std::optional<std::string> EtcdBackend::agent_value(const std::string& key) const {
  if (!m_coordinator) return std::nullopt;
  return m_coordinator->value(key);
}

void EtcdBackend::on_node_lost(int node_rank) {
  // The coordinator's view (it need not be a member of the round).
  if (!m_rounds) return;
  std::string host = "?";
  for (const auto& m : m_rounds->keeper().members()) {
    if (m.node_rank == node_rank) host = m.host;
  }
  spdlog::error("node {} ({}) is lost: its etcd lease lapsed (--node-timeout {} s)", node_rank, host,
                m_config.node_timeout);
  m_rounds->lost(node_rank);
}

void EtcdBackend::log_start() const {
  const auto& etcd = m_config.etcd_settings;
  spdlog::info("elastic rendezvous in etcd at {}://{}:{}{}, {} to {} nodes", etcd.https ? "https" : "http", etcd.host,
               etcd.port, etcd.user.empty() ? std::string() : " as etcd user " + etcd.user, m_config.min_nodes,
               m_config.nnodes);
}

void EtcdBackend::before_attempt(int attempt, std::function<void()> go) {
  if (m_node_rank == 0) {
    // Node rank 0 hosts the workers' store; a node that cannot leaves, and the others form a
    // round without it.
    if (!m_side.host_store(m_host)) {
      m_hooks.leave(EarlyEnd::Usage);
      return;
    }
    m_workers_host = m_host;
    m_workers_port = m_side.store()->port();
  }
  LinkedBackend::before_attempt(attempt, std::move(go));
}

void EtcdBackend::abort_waiting(int, std::function<void()> done) {
  // A waiting node leaves alone, the coordinator included: another rankrun takes the rounds
  // over, the others wait on.
  done();
}

std::string EtcdBackend::opened_value() const { return host_port(m_workers_host, m_workers_port); }

void EtcdBackend::take_opened(const std::string& opened) {
  if (opened.empty()) return;
  const auto colon = opened.rfind(':');
  int port = 0;
  if (colon != std::string::npos) parse_number(std::string_view(opened).substr(colon + 1), port);
  if (colon == std::string::npos || colon == 0 || port <= 0 || port > 65535) {
    spdlog::error("node rank 0 opened the attempt with '{}', which is not HOST:PORT; the workers cannot find its store",
                  opened.substr(0, 200));
    return;
  }
  auto host = opened.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  m_workers_host = std::move(host);
  m_workers_port = static_cast<std::uint16_t>(port);
}

// The coordinator need not be a member of the round (a spare elected after the one before was
// lost): the notice goes to the attempt the round runs.
int EtcdBackend::membership_attempt(int next_round) const { return running_attempt(next_round - 1); }

int EtcdBackend::running_attempt(int round) const {
  int attempt = cluster::attempt_id(round, 0);
  if (!m_coordinator) return attempt;
  for (const auto& [key, value] : m_coordinator->keys("attempt/")) {
    int id = -1;
    const auto rest = std::string_view(key).substr(8);
    const auto slash = rest.find('/');
    if (slash == std::string_view::npos || rest.substr(slash) != "/open" || !parse_number(rest.substr(0, slash), id)) {
      continue;
    }
    if (id >= cluster::attempt_id(round, 0) && id < cluster::attempt_id(round + 1, 0)) attempt = std::max(attempt, id);
  }
  return attempt;
}

void EtcdBackend::all_final() {
  // The coordinator may be a spare; the job is over for the waiting nodes.
  if (m_rounds && !finished()) m_rounds->close_job("the job is over");
}

void EtcdBackend::wait_for_finals() {
  // The other nodes' results are in etcd, or their leases lapse: not forever.
  m_timer.expires_after(std::chrono::milliseconds(static_cast<long long>(m_config.node_timeout * 1000)) + k_linger);
  m_timer.async_wait([this](boost::system::error_code ec) {
    if (!ec) shut_down();
  });
}

void EtcdBackend::before_stop() {
  if (m_coordinator) m_coordinator->stop();  // sends the last answers (spares told the job is over)
}

}  // namespace rankrun::launcher::rdzv
