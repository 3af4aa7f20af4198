// The Job's share of --rdzv-backend=etcd: the election of the rankrun that coordinates the
// rounds, that coordinator's reading of etcd's changes, and the workers' store, hosted by node
// rank 0 of each round.

#include <unistd.h>

#include <charconv>
#include <map>
#include <set>
#include <spdlog/spdlog.h>

#include "launcher/cli/host_facts.hpp"
#include "launcher/job/job.hpp"

namespace rankrun::launcher {
namespace {

// "round/<k>/lease/<r>" -> {k, r}.
std::optional<std::pair<int, int>> round_lease_in_key(std::string_view key) {
  constexpr std::string_view prefix = "round/";
  if (key.substr(0, prefix.size()) != prefix) return std::nullopt;
  key.remove_prefix(prefix.size());
  const auto slash = key.find("/lease/");
  if (slash == std::string_view::npos) return std::nullopt;
  int round = -1, node = -1;
  const auto r = key.substr(0, slash), n = key.substr(slash + 7);
  if (std::from_chars(r.data(), r.data() + r.size(), round).ptr != r.data() + r.size() || round < 0) return std::nullopt;
  if (std::from_chars(n.data(), n.data() + n.size(), node).ptr != n.data() + n.size() || node < 0) return std::nullopt;
  return std::pair{round, node};
}

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

// Elected: this rankrun keeps the rounds from now on. A job already under way (the coordinator
// before it was lost, or stopped) goes on from what etcd holds: the last round's answers name
// its members, a member whose lease key is gone is lost, and the nodes waiting are joined.
void Job::on_elected() {
  if (m_finished) return;
  coordinate(m_coordinator.get());
  m_leases->use_external_leases();
  m_leases->on_join(1, 0, cluster::k_agents_key_space);  // every change it is shown is a node's
  if (const auto closed = m_coordinator->value(cluster::k_closed_key)) {
    const bool failed = closed->rfind("abort\n", 0) == 0;
    spdlog::info("this node coordinates the rounds; the job is over already");
    m_rounds->close_job(closed->substr(closed->find('\n') + 1), failed);
    return;
  }
  // The last round any node was answered: its map (hosts by node rank), and the answers'
  // instances. A member lost already (the coordinator before, perhaps) is in the map still.
  std::optional<cluster::Assignment> last;
  std::map<int, std::string> instances;  // node rank -> instance, in the last round
  std::set<std::string> answered;        // members, and nodes told the job is over
  for (const auto& [key, value] : m_coordinator->keys("assign/")) {
    const auto instance = key.substr(7);
    answered.insert(instance);
    const auto a = cluster::decode_assignment(value);
    if (!a) continue;
    if (!last || a->round > last->round) {
      last = a;
      instances.clear();
    }
    if (a->round == last->round) instances[a->node_rank] = instance;
  }
  int round = -1;
  int nodes = 0;
  std::vector<cluster::NodeRecord> members;
  if (last) {
    std::vector<std::string> pages;
    for (int p = 0; p < last->pages; ++p) pages.push_back(m_coordinator->value(cluster::round_map_key(last->round, p)).value_or(""));
    if (auto map = cluster::decode_pages(pages, last->round, last->nodes)) {
      round = last->round;
      nodes = last->nodes;
      for (auto& m : map->members) {
        const auto it = instances.find(m.node_rank);
        // A member that asked for the next round already has no answer left: any name that no
        // join will match (the round it is in then closes at the last call, not at once).
        m.instance = it != instances.end() ? it->second : "round-" + std::to_string(round) + "-node-" + std::to_string(m.node_rank);
        members.push_back(std::move(m));
      }
    } else {
      spdlog::error("round {}'s map in etcd is not readable; starting the rounds afresh", last->round);
    }
  }
  if (round < 0) {
    spdlog::info("this node coordinates the rounds (elected in etcd)");
  } else {
    spdlog::warn("this node coordinates the rounds from now on (the coordinator before it is gone): round {} runs "
                 "with {} node{}", round, nodes, nodes == 1 ? "" : "s");
    m_rounds->resume(round, members);
    m_leases->start_round(nodes, cluster::lease_prefix(round));
    for (int r = 0; r < nodes; ++r) {
      if (!m_coordinator->value(cluster::lease_prefix(round) + std::to_string(r))) m_leases->lapsed(r);
    }
  }
  for (const auto& [key, value] : m_coordinator->keys("join/")) {
    const auto instance = key.substr(5);
    if (!answered.count(instance) && m_rounds) m_rounds->joined(instance);
  }
}

void Job::on_etcd_change(const rendezvous::EtcdEvent& e) {
  if (!m_rounds || !m_leases) return;
  if (e.key.rfind("join/", 0) == 0) {
    const auto instance = e.key.substr(5);
    if (e.deleted) {
      m_rounds->left(instance);
    } else {
      m_rounds->joined(instance);
    }
    return;
  }
  if (e.deleted) {
    // A member's lease lapsed (or it stopped and revoked it): lost, unless it sent its result.
    const auto lease = round_lease_in_key(e.key);
    const auto& keeper = m_rounds->keeper();
    if (lease && keeper.running() && lease->first == keeper.round()) m_leases->lapsed(lease->second);
    return;
  }
  m_leases->on_request(1, rendezvous::Op::Set, e.key);  // results and "all ranks exited 0"
}

void Job::host_workers_store(int first_rank) {
  m_workers_host = m_host;
  if (m_store) return;
  rendezvous::ServerOptions options;
  options.bind_address = m_host;
  options.port = m_config.master_port.value_or(0);
  options.protocol = m_config.store_protocol;
  options.port_flag = "--master-port";
  try {
    m_store = std::make_unique<rendezvous::StoreServer>(m_io, options);
  } catch (const rendezvous::StoreBindError& e) {
    // This node cannot be node rank 0: it leaves, and the others form a round without it.
    spdlog::error("node rank 0 hosts the workers' store, and this node cannot: {}", e.what());
    m_finished = true;
    m_exit_code = kExitUsage;
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
