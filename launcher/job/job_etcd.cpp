// The Job's share of --rdzv-backend=etcd: the election of the rankrun that coordinates the
// rounds, that coordinator's reading of etcd's changes, and the workers' store, hosted by node
// rank 0 of each round.

#include <unistd.h>

#include <charconv>
#include <spdlog/spdlog.h>

#include "launcher/cli/host_facts.hpp"
#include "launcher/cluster/etcd_rounds.hpp"
#include "launcher/job/job.hpp"

namespace rankrun::launcher {
namespace {

std::string host_port(const std::string& host, std::uint16_t port) {
  return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

}  // namespace

void Job::start_coordinator() {
  const auto names = local_host_names();
  cluster::EtcdCoordinator::Settings s;
  s.host = m_config.rdzv_host;
  s.port = m_config.rdzv_port;
  s.prefix = "/rankrun/" + m_config.run_id + "/";
  s.node_timeout = std::chrono::milliseconds(static_cast<long long>(m_config.node_timeout * 1000));
  s.name = (names.empty() ? std::string("?") : names.front()) + " pid " + std::to_string(::getpid());
  m_coordinator = std::make_unique<cluster::EtcdCoordinator>(
      m_io, s,
      cluster::EtcdCoordinator::Hooks{[this] { on_elected(); },
                                      [this](const rendezvous::EtcdEvent& e) { on_etcd_change(e); },
                                      [this](const std::string& why) {
                                        spdlog::error("this node stopped coordinating the rounds: {}", why);
                                        if (m_rounds) m_rounds->stop();
                                        if (m_leases) m_leases->stop();
                                      }});
  m_coordinator->start();
}

void Job::on_elected() {
  if (m_finished) return;
  coordinate(m_coordinator.get());
  cluster::take_over(*m_coordinator, *m_rounds, *m_leases);
}

void Job::on_etcd_change(const rendezvous::EtcdEvent& e) {
  if (m_rounds && m_leases) cluster::feed(e, *m_rounds, *m_leases);
}

void Job::host_workers_store(int first_rank) {
  m_workers_host = m_host;
  if (m_store) return;
  try {
    m_store = std::make_unique<rendezvous::StoreServer>(m_io, store_options(m_config, m_host));
  } catch (const rendezvous::StoreBindError& e) {
    // This node cannot be node rank 0: it leaves, and the others form a round without it.
    spdlog::error("node rank 0 hosts the workers' store, and this node cannot: {}", e.what());
    end_early(kExitUsage);
    return;
  }
  m_watch.emplace(m_io, m_store->port(), first_rank,
                  [this](int local_rank, StoreEvent event) { on_store_event(local_rank, event); });
  m_store->add_observer(&*m_watch);
  m_key_space = m_store->begin_key_space("attempt_" + std::to_string(attempt_id()));
  m_key_space_attempt = attempt_id();
  m_workers_port = m_store->port();
}

int Job::running_attempt(int round) const {
  int attempt = cluster::attempt_id(round, 0);
  if (!m_coordinator) return attempt;
  for (const auto& [key, value] : m_coordinator->keys("attempt/")) {
    int id = -1;
    const auto digits = std::string_view(key).substr(8);
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), id);
    if (ec != std::errc() || std::string_view(end, static_cast<std::size_t>(digits.data() + digits.size() - end)) != "/open") {
      continue;
    }
    if (id >= cluster::attempt_id(round, 0) && id < cluster::attempt_id(round + 1, 0)) attempt = std::max(attempt, id);
  }
  return attempt;
}

std::string Job::opened_value() const { return m_config.etcd ? host_port(m_workers_host, m_workers_port) : "1"; }

void Job::take_opened(const std::string& opened) {
  if (!m_config.etcd || opened.empty()) return;
  const auto colon = opened.rfind(':');
  int port = 0;
  if (colon != std::string::npos) std::from_chars(opened.data() + colon + 1, opened.data() + opened.size(), port);
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

}  // namespace rankrun::launcher
