// The Job as others see it: the report and this node's result for node 0 (its rows), systemd's
// status, `rankrun status` and the metrics (observe/), the event log's job_ended.
#include <signal.h>
#include <unistd.h>

#include <boost/asio/steady_timer.hpp>
#include <algorithm>
#include <fmt/format.h>
#include <fstream>
#include <memory>

#include "launcher/types/error_record.hpp"
#include "launcher/files/run_dir.hpp"
#include "launcher/gpu/gpu_guard.hpp"
#include "launcher/job/job.hpp"
#include "launcher/observe/job_status.hpp"
#include "launcher/observe/observer.hpp"
#include "launcher/processes/proc_scan.hpp"
#include "launcher/report/arrival.hpp"

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

// What the rank's heartbeat says (rankrun.progress, the runtime): its step, rate and section.
void add_progress(observe::RankStatus& r, const RankStoreView& view, bool running) {
  r.step = view.step;
  if (running) r.steps_per_second = view.steps_per_second;
  if (running && view.section) {
    r.section = view.section->name;
    r.section_seconds = std::chrono::duration<double>(HangClock::now() - view.section->since).count();
    r.section_timeout = view.section->timeout.count();
  }
}

const char* describe_reason(StopReason r) {
  switch (r) {
    case StopReason::None: return "success";
    case StopReason::Failure: return "rank failure";
    case StopReason::Signal: return "signal";
    case StopReason::Hang: return "hang";
    case StopReason::Remote: return "another node";
    case StopReason::NodeLost: return "node lost";
    case StopReason::StoreHostLost: return "store host lost";
    case StopReason::Membership: return "membership";
    case StopReason::Internal: return "rankrun's own failure";
  }
  return "unknown";
}

void sort_ranks(observe::JobStatus& s) {
  std::sort(s.ranks.begin(), s.ranks.end(), [](const auto& a, const auto& b) { return a.rank < b.rank; });
}

}  // namespace

observe::JobStatus Job::local_status() const {
  observe::JobStatus s;
  const auto now = Clock::now();
  const auto phase = m_policy.phase();
  if (m_finished)
    s.state = "finished";
  else if (!m_nodes.formed || m_nodes.between_rounds)
    s.state = "rendezvous";
  else if (phase == Phase::Running)
    s.state = "running";
  else if (phase == Phase::Stopping || phase == Phase::Killing)
    s.state = "stopping";
  else if (phase == Phase::CleaningUp)
    s.state = "cleaning up";
  else
    s.state = "starting";
  s.entrypoint = m_config.entrypoint_name;
  s.run_id = m_config.run_id;
  s.node_rank = m_nodes.rank;
  s.nnodes = m_nodes.map ? static_cast<int>(m_nodes.map->nodes.size()) : m_config.nnodes;
  s.world_size = m_nodes.map ? m_nodes.map->world_size : static_cast<int>(m_workers.size());
  s.attempt = m_policy.restart_count();
  s.max_restarts = m_config.max_restarts;
  s.round = m_nodes.round;
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
    r.node_rank = m_nodes.rank;
    r.pid = w.pid;
    r.running = w.pid > 0 && outcomes[i].alive && phase != Phase::Waiting;
    r.state = w.pid > 0 ? state_of(outcomes[i].status, r.running) : "not started";
    r.gpu = w.plan.cuda_visible_devices.value_or("");
    if (static_cast<std::size_t>(w.plan.local_rank) < m_config.worker_cpus.size()) {
      r.cpus = format_cpu_list(m_config.worker_cpus[static_cast<std::size_t>(w.plan.local_rank)]);
    }
    if (i < mine.ranks.size() && r.running) {
      r.in = mine.ranks[i].in;
      r.still_seconds = mine.ranks[i].still_seconds;
      r.at = mine.ranks[i].at;
    }
    if (w.pid > 0) add_progress(r, m_store.heartbeat_view(static_cast<int>(i), w.plan.rank), r.running);
    add_usage(r);
    if (const auto it = gpu_memory.find(w.pid); it != gpu_memory.end() && r.running) r.gpu_bytes = it->second;
    s.ranks.push_back(std::move(r));
  }
  // The nodes.
  if (m_nodes.map) {
    const auto leases = m_rdzv->lease_ages();
    for (const auto& n : m_nodes.map->nodes) {
      observe::NodeStatus ns;
      ns.node_rank = n.node_rank;
      ns.host = n.host;
      ns.self = n.node_rank == m_nodes.rank;
      if (static_cast<std::size_t>(n.node_rank) < leases.size())
        ns.lease_age = leases[static_cast<std::size_t>(n.node_rank)];
      s.nodes.push_back(std::move(ns));
    }
    // The deciding node keeps every other node's latest progress.
    for (const auto& [progress, age] : m_hang.others()) {
      add_remote(s, progress, m_nodes.map);
      if (static_cast<std::size_t>(progress.node_rank) < s.nodes.size()) {
        s.nodes[static_cast<std::size_t>(progress.node_rank)].progress_age = age;
      }
      s.view = "node " + std::to_string(m_nodes.rank);
    }
  }
  sort_ranks(s);
  observe::add_hang_clocks(s);
  return s;
}

void Job::status(std::function<void(observe::JobStatus)> answer) {
  auto s = local_status();
  const bool complete = static_cast<int>(s.ranks.size()) >= s.world_size;
  if (!m_nodes.map || complete || !m_last_mine || m_finished) {
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
                             if (node.node_rank != m_nodes.rank) add_remote(whole, node, m_nodes.map);
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

void Job::log_event(std::string_view type, const Json& fields) const {
  if (m_parts.observer) m_parts.observer->event(type, fields, m_nodes.rank);
}

void Job::log_progress(int rank, const WorkersStore::StepReport& report, bool section_changed) const {
  if (report.periodic) {
    log_event("progress", {{"rank", rank},
                           {"step", report.step},
                           {"steps_per_second", report.per_second ? Json(*report.per_second) : Json(nullptr)}});
  }
  if (section_changed) {
    if (report.section) {
      log_event("section",
                {{"rank", rank}, {"name", report.section->name}, {"timeout_seconds", report.section->timeout.count()}});
    } else {
      log_event("section", {{"rank", rank}, {"name", nullptr}});
    }
  }
}

RunSummary Job::summarize(int exit_code) {
  RunSummary s;
  s.reason = m_policy.reason();
  s.root = m_policy.root_cause();
  s.signal = m_policy.stop_signal();
  s.exit_code = exit_code;
  s.restart_count = m_policy.restart_count();
  s.pinned = m_config.pin;
  s.entrypoint = m_config.entrypoint_name;
  s.python = m_config.python_line;
  s.seconds = seconds_between(m_job_start, Clock::now());
  if (m_store.server()) {
    // arrivals() maps what is still pending first: the connections left unmatched are those closed before.
    const auto arrivals = m_store.arrivals();
    s.arrivals = describe_arrivals(arrivals, m_store.duplicate_rank(), m_store.unmatched_connections());
  }
  if (m_nodes.map) {
    s.node_label = "node " + std::to_string(m_nodes.rank) + (m_nodes.host.empty() ? "" : " (" + m_nodes.host + ")");
    s.job_notice = m_nodes.attempt.notice;
    s.store_host_lost = m_nodes.store_host_lost;
    s.root_sent = m_nodes.attempt.root_sent;
  }
  s.preempted = m_policy.preempted() && m_policy.reason() == StopReason::Signal;
  s.own_failure = m_own_failure;
  const auto& outcomes = m_policy.workers();
  for (std::size_t i = 0; i < m_workers.size(); ++i) {
    const auto& w = *m_workers[i];
    RankReport r;
    r.rank = w.plan.rank;
    r.local_rank = w.plan.local_rank;
    r.pid = w.pid;
    r.status = outcomes[i].status;
    r.stopped_by_rankrun = outcomes[i].stopped_by_rankrun;
    const auto time = rank_time(i, r.status);
    r.seconds = time.seconds;
    r.seconds_exact = time.exact;
    const auto& tail = m_output.stderr_tail(static_cast<int>(i));
    r.stderr_tail.assign(tail.begin(), tail.end());
    r.error_file = w.error_file;
    if (r.status && !r.status->success()) {
      if (const auto text = read_below(m_paths.dir_fd, w.error_rel, k_error_file_max))
        r.error = parse_error_json(*text);
    }
    s.ranks.push_back(std::move(r));
  }
  // A rank that failed on a GPU NVML now calls unfit (an Xid: lost, needing a reset, ECC).
  if (m_parts.gpus && s.root && m_config.pin) {
    if (const auto& gpu = m_workers[static_cast<std::size_t>(*s.root)]->plan.cuda_visible_devices) {
      s.gpu_notes = m_parts.gpus->unfit_now(*gpu);
    }
  }
  return s;
}

cluster::NodeFinal Job::final_report(const RunSummary& summary) const {
  cluster::NodeFinal f;
  f.node_rank = m_nodes.rank;
  f.host = m_nodes.host;
  f.exit_code = summary.exit_code;
  // This node's first failure is the job's root cause only when no other node's notice came
  // first (a lost node, another node's failure).
  const bool own_root = !m_nodes.attempt.notice || (m_nodes.attempt.notice->kind == cluster::StopKind::Failure &&
                                                    m_nodes.attempt.notice->node_rank == m_nodes.rank);
  for (const auto& r : summary.ranks) {
    std::string result = r.status ? (r.status->success() ? "exit 0" : r.status->describe()) : "still running";
    if (r.stopped_by_rankrun && r.status && !r.status->success()) result += " (stopped by rankrun)";
    if (summary.root && *summary.root == r.local_rank && own_root) result += "  <- root cause";
    // A hung job's rows say where each rank was: node 0's summary then covers every node's.
    if (m_nodes.attempt.notice && m_nodes.attempt.notice->kind == cluster::StopKind::Hang) {
      if (const auto where = m_hang.last_seen(r.local_rank); !where.empty()) result += "; was " + where;
    }
    f.rows.push_back("rank " + std::to_string(r.rank) + " (local " + std::to_string(r.local_rank) + ", pid " +
                     std::to_string(r.pid) + "): " + result);
  }
  return f;
}

ServiceSnapshot Job::service_snapshot() const {
  ServiceSnapshot s;
  s.restart_count = m_policy.restart_count();
  s.max_restarts = m_config.max_restarts;
  s.node_rank = m_nodes.rank;
  s.nnodes = m_nodes.map ? static_cast<int>(m_nodes.map->nodes.size()) : m_config.nnodes;
  const auto& outcomes = m_policy.workers();
  s.ranks_running =
      static_cast<int>(std::count_if(outcomes.begin(), outcomes.end(), [](const auto& o) { return o.alive; }));
  s.last_step = m_last_step;
  if (!m_nodes.formed) {
    s.state = ServiceSnapshot::State::WaitingForNodes;
  } else if (m_policy.phase() != Phase::Running) {
    s.state = ServiceSnapshot::State::Stopping;
    switch (m_policy.reason()) {
      case StopReason::None: s.why = "every rank finished"; break;
      case StopReason::Failure:
        if (const auto root = m_policy.root_cause()) {
          const auto& status = outcomes[static_cast<std::size_t>(*root)].status;
          s.why = "rank " + std::to_string(m_workers[static_cast<std::size_t>(*root)]->plan.rank) + " failed (" +
                  (status ? status->describe() : std::string("?")) + ")";
        } else {
          s.why = "a rank failed";
        }
        break;
      case StopReason::Signal: s.why = "received " + signal_name(m_policy.stop_signal().value_or(SIGTERM)); break;
      case StopReason::Hang: s.why = "a hang was detected"; break;
      case StopReason::StoreHostLost: s.why = "lost the store host"; break;
      case StopReason::Internal: s.why = "rankrun could not go on: " + m_own_failure; break;
      case StopReason::Remote:
      case StopReason::NodeLost:
      case StopReason::Membership:
        s.why = m_nodes.attempt.notice ? m_nodes.attempt.notice->describe()
                                       : std::string("the job stopped on another node");
        break;
    }
  }
  return s;
}

Json Job::ended_fields(const RunSummary& summary) const {
  Json ranks = Json::array();
  for (const auto& r : summary.ranks) {
    ranks.push_back({{"rank", r.rank},
                     {"local_rank", r.local_rank},
                     {"pid", r.pid},
                     {"result", r.status ? r.status->describe() : "not started"},
                     {"seconds", json_seconds(r.seconds)}});
  }
  const auto root = summary.root ? summary.ranks[static_cast<std::size_t>(*summary.root)].rank : -1;
  return {{"exit_code", summary.exit_code},
          {"reason", describe_reason(summary.reason)},
          {"root_cause_rank", root >= 0 ? Json(root) : Json(nullptr)},
          {"restarts", summary.restart_count},
          {"seconds", json_seconds(summary.seconds)},
          {"ranks", std::move(ranks)}};
}

Job::RankTime Job::rank_time(std::size_t i, const std::optional<ExitStatus>& status) const {
  const auto& w = *m_workers[i];
  if (w.pid <= 0) return {0, true};
  if (w.ended == Clock::time_point{}) return {seconds_between(w.started, Clock::now()), true};
  RankTime t{seconds_between(w.started, w.ended), w.ended_exact};
  if (!w.ended_exact && status && !status->success()) {
    // rankrun saw its exit late: the rank's own record of its failure, when it wrote one.
    const auto ended_by =
        w.started_wall + std::chrono::duration_cast<std::chrono::system_clock::duration>(w.ended - w.started);
    if (const auto own =
            own_failure_seconds(read_failure_record(m_paths.dir_fd, "stacks/", w.pid), w.started_wall, ended_by))
      t = {*own, true};
  }
  return t;
}

}  // namespace rankrun::launcher
