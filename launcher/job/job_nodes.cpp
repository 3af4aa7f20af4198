// The Job as one node of several: the round it joined, the notice that ends each attempt on
// every node, and the stop this node publishes (or holds back: a victim's failure until the
// lease of the node it blames is known, a hang's stop until every node has its evidence).
// The lifecycle on this node is in job.cpp, the Job as others see it in job_views.cpp.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <spdlog/spdlog.h>
#include <utility>

#include "launcher/types/error_record.hpp"
#include "launcher/cluster/attempt_steps.hpp"
#include "launcher/files/run_dir.hpp"
#include "launcher/gpu/gpu_guard.hpp"
#include "launcher/job/job.hpp"
#include "launcher/job/stop_hold.hpp"
#include "launcher/observe/observer.hpp"
#include "launcher/report/arrival.hpp"

namespace rankrun::launcher {
using Clock = std::chrono::steady_clock;

namespace {

// How long a failed root cause's stderr is read on for its last lines before its stop is
// published without them.
constexpr auto k_tail_wait = std::chrono::milliseconds(300);
// How long every node of a multi-node job keeps its ranks up once a hang is called, so that each
// node collects its ranks' stacks and flight recorder dumps (samplers answer within a second)
// before a rank anywhere is stopped.
constexpr auto k_evidence_window = std::chrono::seconds(3);

// How long a failure that names another node as the peer it lost is held: until that node's
// lease has lapsed (--node-timeout after its last refresh, which is at most a lease interval
// old) and the notice of its loss has come, with a second to spare.
Clock::duration victim_hold(double node_timeout) {
  const auto timeout = std::chrono::milliseconds(static_cast<long long>(node_timeout * 1000));
  return timeout + cluster::lease_interval(timeout) + std::chrono::seconds(1);
}

}  // namespace

rdzv::JobSide Job::job_side() {
  return rdzv::JobSide{[this] { return m_store.server(); },
                       [this](const std::string& host) { return host_store(host); }, [this] { return attempt_id(); },
                       [this] { return m_finished; }};
}

rdzv::Hooks Job::rendezvous_hooks() {
  rdzv::Hooks h;
  h.formed = [this](rdzv::Round round) { on_formed(std::move(round)); };
  h.failed = [this](EarlyEnd end, std::string message) { on_rendezvous_failed(end, std::move(message)); };
  h.notice = [this](int attempt, cluster::StopNotice n) { on_notice(attempt, std::move(n)); };
  h.lost = [this](std::string why) { on_job_lost(std::move(why)); };
  h.leave = [this](EarlyEnd end) { end_early(JobEnding::ended_early(end)); };
  h.waiting = [this] { notify_status(); };
  return h;
}

// etcd: node rank 0 of a round hosts the workers' store (once: it serves every round after).
bool Job::host_store(const std::string& host) {
  if (m_store.server()) return true;
  try {
    m_store.host(std::make_unique<rendezvous::StoreServer>(m_io, rdzv::store_options(m_config, host)),
                 m_workers.front()->plan.rank, attempt_id());
  } catch (const rendezvous::StoreBindError& e) {
    spdlog::error("node rank 0 hosts the workers' store, and this node cannot: {}", e.what());
    return false;
  }
  // The round is formed already (its on_formed found no store to filter).
  admit_the_nodes_workers();
  return true;
}

void Job::admit_the_nodes_workers() {
  auto* server = m_store.server();
  if (server == nullptr || !m_nodes.map) return;
  // The workers' store admits workers from the job's nodes (and loopback) only.
  std::vector<std::string> hosts;
  for (const auto& node : m_nodes.map->nodes) hosts.push_back(node.host);
  server->admit_workers_from(std::move(hosts));
}

void Job::on_rendezvous_failed(EarlyEnd end, std::string message) {
  spdlog::error("{}", message);
  if (m_finished) return;
  if (m_nodes.between_rounds || !m_nodes.map) {
    end_early(JobEnding::ended_early(end));
    return;
  }
  // A restart barrier that failed: the workers are gone already.
  m_nodes.store_host_lost = true;
  dispatch(event::JobStop{StopReason::StoreHostLost, exit_code(JobEnding::ended_early(end)), false});
  if (m_nodes.attempt.awaiting_notice) dispatch(event::CleanedUp{m_cleanup_unkillable});
}

void Job::on_job_lost(std::string why) {
  if (m_finished) {
    if (!m_shut_down) shutdown();
    return;
  }
  if (m_nodes.between_rounds) {
    spdlog::error("lost {} between rounds: {}", m_rdzv->where(), why);
    end_early(JobEnding::ended_early(EarlyEnd::StoreHostLost));
    return;
  }
  auto ending = JobEnding::ended_early(EarlyEnd::StoreHostLost);
  const auto root = m_policy.root_cause();
  const auto& root_status = root ? m_policy.workers()[static_cast<std::size_t>(*root)].status : std::nullopt;
  if (m_nodes.attempt.root_sent && root_status) {
    // This node's own failure went out as the root cause (no peer lost, or its node's lease held)
    // before the store host went: that is known for certain, and the node exits with its code.
    ending = JobEnding::failed(*root_status);
    spdlog::error("lost {}: {}; rank {} on this node failed first (the root cause here): exiting with its code {}",
                  m_rdzv->where(), why, m_workers[static_cast<std::size_t>(*root)]->plan.rank, exit_code(ending));
  } else {
    spdlog::error("lost {}: {}; stopping this node's workers", m_rdzv->where(), why);
  }
  m_nodes.store_host_lost = true;
  dispatch(event::JobStop{StopReason::StoreHostLost, exit_code(ending), false});
  if (m_nodes.attempt.awaiting_notice) {
    m_nodes.attempt.awaiting_notice = false;
    dispatch(event::CleanedUp{m_cleanup_unkillable});
  }
}

void Job::on_hang_found() {
  log_event("hang", {{"report", m_hang.last_report()}});
  if (!m_nodes.map || m_nodes.attempt.published || m_nodes.attempt.notice) {
    dispatch(event::HangDetected{});
    return;
  }
  // Several nodes: the hang goes out first, and every node's ranks stay up for the evidence
  // window, in which each node collects its ranks' stacks and flight recorder dumps (a rank
  // stopped at once would make its peers on the other nodes fail before they are looked at).
  cluster::StopNotice n;
  n.kind = cluster::StopKind::Hang;
  n.node_rank = m_nodes.rank;
  n.host = m_nodes.host;
  n.report = m_hang.last_report();
  send_local_stop(std::move(n));
  hold_for_evidence([this] { dispatch(event::HangDetected{}); }, k_evidence_window);
}

void Job::hold_for_evidence(std::function<void()> then, std::chrono::steady_clock::duration longest) {
  m_nodes.attempt.evidence_then = std::move(then);
  m_nodes.evidence_timer.expires_after(longest);
  m_nodes.evidence_timer.async_wait([this, attempt = attempt_id()](boost::system::error_code ec) {
    if (!ec && attempt == attempt_id()) end_evidence_hold();
  });
}

void Job::end_evidence_hold() {
  auto then = std::exchange(m_nodes.attempt.evidence_then, nullptr);
  m_nodes.evidence_timer.cancel();
  if (then && !m_finished) then();
}

void Job::on_formed(rdzv::Round round) {
  if (m_finished) return;
  m_nodes.formed = true;
  m_nodes.between_rounds = false;
  m_nodes.round_first_attempt = m_policy.attempt();
  if (round.map) {
    auto& map = *round.map;
    m_nodes.host = std::move(round.host);
    m_nodes.rank = round.node_rank;
    m_nodes.round = round.round;
    const int first_rank = map.nodes[static_cast<std::size_t>(m_nodes.rank)].first_rank;
    auto lines = cluster::format_node_map(map);
    if (m_nodes.round >= 0) {
      lines = fmt::format("round {}: {} node{}, world size {}{}\n", m_nodes.round, map.nodes.size(),
                          map.nodes.size() == 1 ? "" : "s", map.world_size, m_rdzv->role(m_nodes.rank)) +
              lines;
    }
    std::string text;
    for (std::size_t at = 0; at < lines.size();) {
      const auto nl = lines.find('\n', at);
      const auto end = nl == std::string::npos ? lines.size() : nl + 1;
      text += "rankrun: " + lines.substr(at, end - at);
      at = end;
    }
    Console::write_all(2, text);
    Json nodes = Json::array();
    for (const auto& n : map.nodes) {
      nodes.push_back({{"node", n.node_rank}, {"host", n.host}, {"first_rank", n.first_rank}, {"nproc", n.nproc}});
      const bool known = m_nodes.map && std::any_of(m_nodes.map->nodes.begin(), m_nodes.map->nodes.end(),
                                                    [&n](const cluster::NodeSpan& o) { return o.host == n.host; });
      if (m_nodes.map && !known)
        log_event("node_joined", {{"joined", n.node_rank}, {"host", n.host}, {"round", m_nodes.round}});
    }
    log_event(
        "rendezvous",
        {{"round", m_nodes.round}, {"node_rank", m_nodes.rank}, {"world_size", map.world_size}, {"nodes", nodes}});
    const auto plans =
        plan_workers(m_config, first_rank, map.world_size, m_nodes.rank, static_cast<int>(map.nodes.size()));
    for (std::size_t i = 0; i < m_workers.size(); ++i) m_workers[i]->plan = plans[i];
    m_console.set_host(m_nodes.host);
    m_store.set_first_rank(first_rank);
    // The collectives' hangs are the job's, decided by node rank 0 of the round from every node's progress.
    m_hang.set_job(static_cast<int>(map.nodes.size()), m_nodes.rank, map.world_size, m_nodes.rank == 0);
    m_nodes.map = std::move(map);
    admit_the_nodes_workers();
  }
  const int id = attempt_id();
  m_rdzv->before_attempt(id, [this] { start_attempt(); });
}

void Job::publish_local_stop() {
  if (!m_nodes.map) return;
  cluster::StopNotice n;
  n.node_rank = m_nodes.rank;
  n.host = m_nodes.host;
  switch (m_policy.reason()) {
    case StopReason::Failure: {
      const auto root = m_policy.root_cause();
      if (!root) return;
      const auto& w = *m_workers[static_cast<std::size_t>(*root)];
      n.kind = cluster::StopKind::Failure;
      n.rank = w.plan.rank;
      n.local_rank = w.plan.local_rank;
      n.status = *m_policy.workers()[static_cast<std::size_t>(*root)].status;
      const auto time = rank_time(static_cast<std::size_t>(*root), n.status);
      n.ms = static_cast<int>(std::lround(time.seconds * 1000));
      n.ms_exact = time.exact;
      const auto& tail = m_output.stderr_tail(*root);
      n.stderr_tail.assign(tail.begin(), tail.end());
      n.error_file = w.error_file;
      if (const auto text = read_below(m_paths.dir_fd, w.error_rel, k_error_file_max))
        n.error = parse_error_json(*text);
      n.restartable = true;
      const auto decision = decide_stop_hold(
          *root, m_output.is_open(*root, StreamId::Err), m_nodes.attempt.tail_wait,
          [this](int i) -> const std::deque<std::string>& { return m_output.stderr_tail(i); },
          static_cast<int>(m_workers.size()), *m_nodes.map, m_nodes.rank);
      if (decision.hold == StopHold::ReadTail) {
        // Its last lines (the exception, the peer it lost) may still be in the pipe: they go
        // with the notice, read to the end (on_closed) or for at most k_tail_wait.
        m_nodes.attempt.tail_wait = true;
        m_nodes.attempt.published = true;
        m_nodes.hold_timer.expires_after(k_tail_wait);
        m_nodes.hold_timer.async_wait([this, attempt = attempt_id()](boost::system::error_code ec) {
          if (!ec && attempt == attempt_id()) publish_held_failure();
        });
        return;
      }
      if (decision.hold == StopHold::AsVictim) {
        // A victim of another node's death, most likely: hold it until that node's lease is
        // known. A lost node's notice (or that node's own failure) comes first and wins.
        const int peer = decision.peer;
        const auto& node = m_nodes.map->nodes[static_cast<std::size_t>(peer)];
        const auto hold = victim_hold(m_config.node_timeout);
        spdlog::warn(
            "rank {} lost its connection to node {} ({}); holding its failure for up to {:.1f} s, until node "
            "{}'s lease is known",
            n.rank, peer, node.host, std::chrono::duration<double>(hold).count(), peer);
        m_nodes.attempt.published = true;
        m_nodes.hold_timer.expires_after(hold);
        m_nodes.hold_timer.async_wait([this, attempt = attempt_id(), peer, n](boost::system::error_code ec) {
          if (ec || attempt != attempt_id() || m_nodes.attempt.notice || m_finished) return;
          spdlog::warn("node {} was not lost: rank {}'s failure is the root cause", peer, n.rank);
          send_local_stop(n);
        });
        return;
      }
      break;
    }
    case StopReason::Signal:
      n.kind = cluster::StopKind::Signal;
      n.signo = m_policy.stop_signal().value_or(SIGTERM);
      n.preempted = m_policy.preempted();
      break;
    case StopReason::Hang:
      n.kind = cluster::StopKind::Hang;
      n.report = m_hang.last_report();
      break;
    case StopReason::Internal:
      n.kind = cluster::StopKind::Internal;
      n.report = m_own_failure;
      break;
    default: return;
  }
  send_local_stop(std::move(n));
}

void Job::share_progress(cluster::NodeProgress mine) {
  if (m_finished || !m_nodes.map) return;
  std::function<void(std::vector<cluster::NodeProgress>)> every_node;
  if (m_nodes.rank == 0) {
    every_node = [this, attempt = attempt_id()](std::vector<cluster::NodeProgress> nodes) {
      if (!m_finished && attempt == attempt_id()) m_hang.take_progress(nodes);
    };
  }
  m_last_mine = mine;
  m_rdzv->share_progress(attempt_id(), mine, std::move(every_node));
}

void Job::publish_held_failure() {
  if (m_nodes.attempt.notice || m_finished) return;
  m_nodes.attempt.published = false;
  publish_local_stop();
}

void Job::send_local_stop(cluster::StopNotice notice) {
  m_nodes.attempt.published = true;
  m_nodes.attempt.root_sent = notice.kind == cluster::StopKind::Failure;
  m_rdzv->publish_stop(attempt_id(), std::move(notice));
}

void Job::on_notice(int attempt, cluster::StopNotice notice) {
  if (m_finished || attempt != attempt_id() || m_nodes.attempt.notice) return;
  const bool mine = notice.node_rank == m_nodes.rank && notice.kind != cluster::StopKind::Success &&
                    notice.kind != cluster::StopKind::NodeLost && notice.kind != cluster::StopKind::Membership;
  if (!mine && notice.kind != cluster::StopKind::Success) spdlog::warn("stopping the job: {}", notice.describe());
  const bool hang = notice.kind == cluster::StopKind::Hang;
  m_nodes.attempt.notice = std::move(notice);
  // This node's own hang holds its ranks for the evidence window already (on_hang_found).
  if (hang && mine && m_nodes.attempt.evidence_then) return;
  if (hang && !mine) {
    // Another node's hang: its report, the same on every node; then this node's evidence (its
    // ranks' stacks and flight recorder dumps, kept in its log dir) while every node holds its
    // ranks for the evidence window.
    if (!m_nodes.attempt.notice->report.empty()) Console::write_all(2, m_nodes.attempt.notice->report);
    const bool collecting = m_hang.collect_evidence([this, attempt](const std::string& lines) {
      if (m_finished || attempt != attempt_id()) return;
      if (!lines.empty()) Console::write_all(2, "rankrun: this node's ranks:\n" + lines);
    });
    if (!collecting) {
      if (const auto lines = m_hang.rank_lines(); !lines.empty())
        Console::write_all(2, "rankrun: this node's ranks:\n" + lines);
    }
    hold_for_evidence([this] { act_on_notice(); }, k_evidence_window);
    return;
  }
  act_on_notice();
}

void Job::act_on_notice() {
  const auto& notice = *m_nodes.attempt.notice;
  StopReason reason = StopReason::Remote;
  if (notice.kind == cluster::StopKind::Success) reason = StopReason::None;
  if (notice.kind == cluster::StopKind::NodeLost) reason = StopReason::NodeLost;
  const bool membership = notice.kind == cluster::StopKind::Membership;
  if (membership) reason = StopReason::Membership;
  const auto code = notice.exit_code();
  const bool restartable = notice.restartable;
  if (notice.kind == cluster::StopKind::NodeLost) {
    log_event("node_lost", {{"lost", notice.node_rank}, {"why", notice.describe()}});
  } else if (membership) {
    log_event("membership", {{"why", notice.describe()}});
  } else if (notice.kind != cluster::StopKind::Success && notice.node_rank != m_nodes.rank) {
    log_event("remote_stop", {{"from", notice.node_rank}, {"why", notice.describe()}});
  }
  dispatch(event::JobStop{reason, code, restartable, membership});
  if (m_nodes.attempt.awaiting_notice) {
    m_nodes.attempt.awaiting_notice = false;
    dispatch(event::CleanedUp{m_cleanup_unkillable});
  }
}

}  // namespace rankrun::launcher
