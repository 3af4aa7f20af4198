#include "launcher/rdzv/linked_backend.hpp"

#include <spdlog/spdlog.h>

#include <utility>

#include "launcher/host/host_facts.hpp"
#include "launcher/report/console.hpp"

namespace rankrun::launcher::rdzv {

LinkedBackend::LinkedBackend(boost::asio::io_context& io, const LaunchConfig& config, JobSide side, Channels channels)
    : m_io(io),
      m_config(config),
      m_side(std::move(side)),
      m_channels(std::move(channels)),
      m_node_rank(config.node_rank),
      m_timer(io) {}

LinkedBackend::~LinkedBackend() { stop_parts(); }

void LinkedBackend::stop_parts() {
  if (m_link) m_link->stop();
  m_link.reset();
  m_rounds.reset();
  m_leases.reset();
}

std::uint16_t LinkedBackend::workers_port() const {
  const auto* store = m_side.store();
  return store ? store->port() : m_config.master_port.value_or(0);
}

std::string LinkedBackend::workers_host() const {
  if (store_bind_address(m_config) == m_config.master_addr) return m_config.master_addr;
  const auto name = this_machine_name();
  return name.empty() ? m_config.master_addr : name;
}

cluster::LinkSettings LinkedBackend::link_settings() const {
  cluster::LinkSettings s;
  s.channel = channel();
  if (m_channels.link) s.channel.connect = m_channels.link;
  s.node_rank = m_config.node_rank;
  s.nnodes = m_config.nnodes;
  s.elastic = is_elastic(m_config.rdzv);
  s.opens_attempts = attempt_opener();
  s.nproc = m_config.nproc;
  s.local_addr = m_config.local_addr;
  // The store host reached over loopback (TorchX's localhost endpoint) would be known to the
  // others as ::1: it goes by the address the other machines know it by.
  if (s.local_addr.empty() && store_bind_address(m_config) != m_config.master_addr) {
    s.local_addr = this_machine_address();
  }
  s.run_id = m_config.run_id;
  s.rdzv_timeout = std::chrono::milliseconds(static_cast<long long>(m_config.rdzv_timeout * 1000));
  s.node_timeout = std::chrono::milliseconds(static_cast<long long>(m_config.node_timeout * 1000));
  return s;
}

void LinkedBackend::start(Hooks hooks) {
  prepare(std::move(hooks));
  m_link->start();
}

void LinkedBackend::start_aborted(Hooks hooks, const std::string& message, std::function<void()> done) {
  prepare(std::move(hooks));
  m_link->start_aborted(message, std::move(done));
}

void LinkedBackend::prepare(Hooks hooks) {
  m_hooks = std::move(hooks);
  coordinate();
  m_link = std::make_unique<cluster::NodeLink>(
      m_io, link_settings(),
      cluster::LinkHandlers{[this](cluster::NodeMap map, int node_rank, std::string host, int round) {
                              if (finished()) return;
                              const int nodes = static_cast<int>(map.nodes.size());
                              m_map = map;
                              m_node_rank = node_rank;
                              m_host = host;
                              formed_here(round, nodes);
                              m_hooks.formed(Round{std::move(map), node_rank, std::move(host), round});
                            },
                            [this](EarlyEnd end, std::string message) { m_hooks.failed(end, std::move(message)); },
                            [this](int attempt, cluster::StopNotice n) { m_hooks.notice(attempt, std::move(n)); },
                            [this](std::string why) { m_hooks.lost(std::move(why)); }});
  if (m_hooks.waiting) m_hooks.waiting();
  log_start();
}

void LinkedBackend::before_attempt(int attempt, std::function<void()> go) {
  if (attempt == 0 && !first_attempt_waits()) {
    go();
    return;
  }
  // A restart, or a later round (a membership change, or this node joined a running job):
  // every node cleaned up the attempt before when the opener opens this one's key space and
  // any node starts its workers.
  m_link->ready_for(attempt, [this, attempt, go = std::move(go)](const std::string& opened) {
    if (finished()) return;
    take_opened(opened);
    go();
    if (opens_attempts()) m_link->open_attempt(attempt, opened_value());
  });
}

void LinkedBackend::rejoin() {
  if (m_leases) m_leases->stop();
  m_link->rejoin();
}

void LinkedBackend::publish_stop(int attempt, cluster::StopNotice notice) {
  m_link->publish_stop(attempt, std::move(notice));
}

void LinkedBackend::attempt_done(int attempt) { m_link->attempt_done(attempt); }

void LinkedBackend::share_progress(int attempt, const cluster::NodeProgress& mine,
                                   std::function<void(std::vector<cluster::NodeProgress>)> every_node) {
  if (!m_map) return;
  auto p = mine;
  p.node_rank = m_node_rank;
  p.attempt = attempt;
  m_link->share_progress(attempt, cluster::encode(p), static_cast<int>(m_map->nodes.size()), std::move(every_node));
}

void LinkedBackend::job_ended(int exit_code, std::optional<cluster::NodeFinal> result,
                              std::function<void()> shut_down) {
  m_shut_down = std::move(shut_down);
  if (m_rounds) m_rounds->close_job("the job ended with exit code " + std::to_string(exit_code));
  if (!result) {
    this->shut_down();
    return;
  }
  // This node's result goes to the coordinator, which serves until every node's is in.
  m_link->publish_final(*result, [this](bool delivered) {
    spdlog::debug("this node's result {}", delivered ? "was delivered" : "was not delivered");
    if (!delivered && !coordinates()) {
      spdlog::error("this node's result did not reach {}: the job summary there will not have this node's ranks",
                    where());
    }
    m_final_sent = true;
    if (!coordinates()) {
      this->shut_down();
    } else if (m_all_final) {
      serve_last_answers();
    } else {
      wait_for_finals();
    }
  });
}

void LinkedBackend::leave_early(std::function<void()> shut_down) {
  m_shut_down = std::move(shut_down);
  this->shut_down();
}

void LinkedBackend::shut_down() {
  if (auto f = std::exchange(m_shut_down, nullptr)) f();
}

void LinkedBackend::stop(int exit_code) {
  if (m_stopped) return;
  m_stopped = true;
  if (m_leases && m_map && coordinates()) {
    std::vector<cluster::NodeFinal> finals;
    for (int node : m_leases->finals()) {
      if (const auto v = agent_value(cluster::final_key(node))) {
        if (auto f = cluster::decode_final(*v)) finals.push_back(std::move(*f));
      }
    }
    const std::vector<int> lost(m_leases->lost().begin(), m_leases->lost().end());
    std::string rounds;
    if (m_rounds) {
      for (const auto& r : m_rounds->keeper().history()) rounds += "rankrun:   " + r + '\n';
      rounds = "rankrun: rounds:\n" + rounds;
    }
    Console::write_all(2, rounds + cluster::format_job_summary(*m_map, finals, lost, exit_code));
  }
  m_timer.cancel();
  before_stop();
  if (m_link) m_link->stop();
  if (m_leases) m_leases->stop();
  if (m_rounds) m_rounds->stop();
}

void LinkedBackend::make_leases() {
  m_leases = std::make_unique<cluster::LeaseWatch>(
      m_io, m_config.nnodes, std::chrono::milliseconds(static_cast<long long>(m_config.node_timeout * 1000)),
      cluster::LeaseWatch::Hooks{[this](int node) { on_node_lost(node); },
                                 [this](int attempt) {
                                   cluster::StopNotice n;
                                   n.kind = cluster::StopKind::Success;
                                   n.host = m_host;
                                   m_link->publish_stop(attempt, n);
                                 },
                                 [this] {
                                   m_all_final = true;
                                   all_final();
                                   if (m_final_sent) serve_last_answers();
                                 }});
}

void LinkedBackend::make_rounds(cluster::RoundKeys& keys, std::function<void(const cluster::RoundRecord&)> closed) {
  cluster::RoundRules rules;
  rules.min_nodes = m_config.min_nodes;
  rules.max_nodes = m_config.nnodes;
  rules.last_call = std::chrono::milliseconds(static_cast<long long>(m_config.last_call_timeout * 1000));
  rules.join_timeout = std::chrono::milliseconds(static_cast<long long>(m_config.join_timeout * 1000));
  m_rounds = std::make_unique<cluster::RoundHost>(
      m_io, keys, rules,
      cluster::RoundHost::Hooks{
          [this](const std::string& why, int round, int nodes) { publish_membership(why, round, nodes); },
          std::move(closed)});
}

void LinkedBackend::publish_membership(const std::string& why, int next_round, int next_nodes) {
  if (finished() || !publishes_membership()) return;
  cluster::StopNotice n;
  n.kind = cluster::StopKind::Membership;
  n.node_rank = m_node_rank;
  n.host = m_host;
  n.why = why;
  n.next_round = next_round;
  n.next_nodes = next_nodes;
  m_link->publish_stop(membership_attempt(next_round), n);
}

std::vector<double> LinkedBackend::lease_ages() const {
  return m_leases ? m_leases->lease_ages() : std::vector<double>{};
}

}  // namespace rankrun::launcher::rdzv
