// The Job as `rankrun status`, the metrics and the event log show it (observe/).
#include <unistd.h>

#include <boost/asio/steady_timer.hpp>
#include <algorithm>
#include <fstream>
#include <memory>

#include "launcher/gpu/gpu_guard.hpp"
#include "launcher/job/job.hpp"
#include "launcher/observe/job_status.hpp"
#include "launcher/observe/observer.hpp"
#include "launcher/processes/proc_scan.hpp"

namespace rankrun::launcher {

namespace {

// A node that does not decide for the job asks for every node's progress; an answer comes at
// the latest this long after the question, with what it has.
constexpr auto k_remote_wait = std::chrono::seconds(2);
using Clock = std::chrono::steady_clock;

std::string state_of(const std::optional<ExitStatus>& status, bool alive) {
  if (alive) return "running";
  if (!status) return "not started";
  return status->signaled ? "killed by " + status->describe() : "exited " + std::to_string(status->value);
}

// CPU seconds and resident bytes of a live process, from /proc.
void add_usage(observe::RankStatus& r) {
  if (r.pid <= 0 || !r.running) return;
  if (const auto st = read_proc_stat(r.pid)) {
    r.cpu_seconds = static_cast<double>(st->cpu_ticks) / static_cast<double>(::sysconf(_SC_CLK_TCK));
  }
  std::ifstream statm("/proc/" + std::to_string(r.pid) + "/statm");
  std::uint64_t size = 0, resident = 0;
  if (statm >> size >> resident) r.rss_bytes = resident * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
}

void add_remote(observe::JobStatus& s, const cluster::NodeProgress& node, const std::optional<cluster::NodeMap>& map) {
  const int first = map && node.node_rank >= 0 && static_cast<std::size_t>(node.node_rank) < map->nodes.size()
                        ? map->nodes[static_cast<std::size_t>(node.node_rank)].first_rank
                        : 0;
  for (const auto& rp : node.ranks) {
    observe::RankStatus r;
    r.rank = rp.rank;
    r.local_rank = rp.rank - first;
    r.node_rank = node.node_rank;
    r.running = rp.alive;
    r.state = rp.alive ? "running" : rp.exit_code ? "exited " + std::to_string(*rp.exit_code) : "ended";
    r.in = rp.in;
    r.still_seconds = rp.still_seconds;
    r.at = rp.at;
    s.ranks.push_back(std::move(r));
  }
}

void sort_ranks(observe::JobStatus& s) {
  std::sort(s.ranks.begin(), s.ranks.end(), [](const auto& a, const auto& b) { return a.rank < b.rank; });
}

}  // namespace

observe::JobStatus Job::local_status() const {
  observe::JobStatus s;
  const auto now = Clock::now();
  const auto phase = m_policy.phase();
  if (m_finished) s.state = "finished";
  else if (!m_formed || m_between_rounds) s.state = "rendezvous";
  else if (phase == Phase::Running) s.state = "running";
  else if (phase == Phase::Stopping || phase == Phase::Killing) s.state = "stopping";
  else if (phase == Phase::CleaningUp) s.state = "cleaning up";
  else s.state = "starting";
  s.entrypoint = m_config.entrypoint_name;
  s.run_id = m_config.run_id;
  s.node_rank = m_node_rank;
  s.nnodes = m_map ? static_cast<int>(m_map->nodes.size()) : m_config.nnodes;
  s.world_size = m_map ? m_map->world_size : static_cast<int>(m_workers.size());
  s.attempt = m_policy.restart_count();
  s.max_restarts = m_config.max_restarts;
  s.round = m_round;
  s.uptime_seconds = std::chrono::duration<double>(now - m_job_start).count();
  if (m_attempt_start != Clock::time_point{}) {
    s.attempt_seconds = std::chrono::duration<double>(now - m_attempt_start).count();
  }
  if (m_config.hang.progress_timeout) s.progress_timeout = m_config.hang.progress_timeout->count();
  if (m_config.hang.straggler_timeout) s.straggler_timeout = m_config.hang.straggler_timeout->count();
  if (m_parts.observer) s.restarts_by_cause = m_parts.observer->restarts();
  if (const auto* server = m_store.server()) {
    observe::StoreStatus store;
    store.connections = server->connection_count();
    for (const auto space : server->key_spaces()) {
      const auto& state = server->state(space);
      store.keys += state.num_keys();
      store.bytes += state.bytes();
    }
    s.store = store;
  }
  // This node's ranks.
  const auto mine = m_hang.ranks_now();
  const auto gpu_memory = m_parts.gpus ? m_parts.gpus->memory_by_pid() : std::map<pid_t, std::uint64_t>{};
  const auto& outcomes = m_policy.workers();
  for (std::size_t i = 0; i < m_workers.size(); ++i) {
    const auto& w = *m_workers[i];
    observe::RankStatus r;
    r.rank = w.plan.rank;
    r.local_rank = w.plan.local_rank;
    r.node_rank = m_node_rank;
    r.pid = w.pid;
    r.running = w.pid > 0 && outcomes[i].alive && phase != Phase::Waiting;
    r.state = w.pid > 0 ? state_of(outcomes[i].status, r.running) : "not started";
    r.gpu = w.plan.cuda_visible_devices.value_or("");
    if (i < mine.ranks.size() && r.running) {
      r.in = mine.ranks[i].in;
      r.still_seconds = mine.ranks[i].still_seconds;
      r.at = mine.ranks[i].at;
    }
    add_usage(r);
    if (const auto it = gpu_memory.find(w.pid); it != gpu_memory.end() && r.running) r.gpu_bytes = it->second;
    s.ranks.push_back(std::move(r));
  }
  // The nodes.
  if (m_map) {
    const auto leases = m_rdzv->lease_ages();
    for (const auto& n : m_map->nodes) {
      observe::NodeStatus ns;
      ns.node_rank = n.node_rank;
      ns.host = n.host;
      ns.self = n.node_rank == m_node_rank;
      if (static_cast<std::size_t>(n.node_rank) < leases.size()) ns.lease_age = leases[static_cast<std::size_t>(n.node_rank)];
      s.nodes.push_back(std::move(ns));
    }
    // The deciding node keeps every other node's latest progress.
    for (const auto& [progress, age] : m_hang.others()) {
      add_remote(s, progress, m_map);
      if (static_cast<std::size_t>(progress.node_rank) < s.nodes.size()) {
        s.nodes[static_cast<std::size_t>(progress.node_rank)].progress_age = age;
      }
      s.view = "node " + std::to_string(m_node_rank);
    }
  }
  sort_ranks(s);
  observe::add_hang_clocks(s);
  return s;
}

void Job::status(std::function<void(observe::JobStatus)> answer) {
  auto s = local_status();
  const bool complete = static_cast<int>(s.ranks.size()) >= s.world_size;
  if (!m_map || complete || !m_last_mine || m_finished) {
    answer(std::move(s));
    return;
  }
  // Another node's ranks: every node's latest progress, through the store that carries it.
  auto timer = std::make_shared<boost::asio::steady_timer>(m_io, k_remote_wait);
  auto pending = std::make_shared<std::function<void(observe::JobStatus)>>(std::move(answer));
  auto base = std::make_shared<observe::JobStatus>(std::move(s));
  timer->async_wait([pending, base](boost::system::error_code) {
    if (!*pending) return;
    auto late = std::move(*pending);
    *pending = nullptr;
    late(*base);
  });
  m_rdzv->share_progress(attempt_id(), *m_last_mine,
                         [this, pending, base, timer](std::vector<cluster::NodeProgress> nodes) {
                           if (!*pending) return;
                           auto whole = std::move(*base);
                           for (const auto& node : nodes) {
                             if (node.node_rank != m_node_rank) add_remote(whole, node, m_map);
                           }
                           whole.view = "the nodes' progress records";
                           sort_ranks(whole);
                           observe::add_hang_clocks(whole);
                           auto done = std::move(*pending);
                           *pending = nullptr;
                           timer->cancel();
                           done(std::move(whole));
                         });
}

void Job::note(std::string_view type, const std::string& fields) const {
  if (m_parts.observer) m_parts.observer->event(type, fields, m_node_rank);
}

}  // namespace rankrun::launcher
