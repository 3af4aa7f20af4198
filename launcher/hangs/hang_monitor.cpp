// HangMonitor: samples the ranks (their samplers, the runtime's records, CPU time, output, exits),
// judges them against the timeouts (hang_policy, pure), and keeps the progress records nodes
// exchange. What it collects once a hang is found is in hang_evidence.cpp.
#include "launcher/hangs/hang_monitor.hpp"

#include <fmt/format.h>
#include <cstring>
#include <spdlog/spdlog.h>
#include <sstream>

#include "launcher/files/run_dir.hpp"
#include "launcher/hangs/flight_match.hpp"
#include "launcher/hangs/job_view.hpp"
#include "launcher/hangs/stack_dump.hpp"

namespace rankrun::launcher {

HangMonitor::HangMonitor(boost::asio::io_context& io, HangTimeouts timeouts, StackCollector& stacks, Console& console,
                         Hooks hooks)
    : m_timeouts(timeouts),
      m_stacks(stacks),
      m_console(console),
      m_hooks(std::move(hooks)),
      m_timer(io),
      m_look_timer(io) {}

namespace {

// How often the ranks are looked at: often enough that a hang is seen within a few percent of
// --progress-timeout, at most every 5 seconds.
std::chrono::milliseconds look_interval(const HangTimeouts& t) {
  double s = 5;
  if (t.progress_timeout) s = std::min(s, t.progress_timeout->count() / 6);
  if (t.straggler_timeout) s = std::min(s, t.straggler_timeout->count() / 6);
  return std::chrono::milliseconds(static_cast<long>(std::max(s, 0.5) * 1000));
}

// The samplers' clock is CLOCK_MONOTONIC, as the steady clock's.
HangTime from_monotonic(double seconds) {
  return HangTime(std::chrono::duration_cast<HangClock::duration>(std::chrono::duration<double>(seconds)));
}

}  // namespace

RankActivity* HangMonitor::rank(int local_rank) {
  if (m_stopped || local_rank < 0 || static_cast<std::size_t>(local_rank) >= m_ranks.size()) return nullptr;
  return &m_ranks[static_cast<std::size_t>(local_rank)];
}

void HangMonitor::start_attempt(const std::vector<pid_t>& pids, const std::vector<int>& ranks, UniqueFd attempt_dir,
                                std::string attempt_dir_path) {
  m_pids = pids;
  m_global = ranks;
  m_attempt_dir = std::move(attempt_dir);
  m_attempt_dir_path = std::move(attempt_dir_path);
  m_ranks.assign(pids.size(), RankActivity{});
  m_status.assign(pids.size(), std::nullopt);
  m_samples.assign(pids.size(), std::nullopt);
  m_cpu.assign(pids.size(), std::nullopt);
  m_next_warning.reset();
  m_warned_rendezvous = false;
  m_stopped_at.reset();
  const auto now = HangClock::now();
  for (auto& r : m_ranks) r.started = now;
  m_attempt_started = now;
  m_remote.assign(static_cast<std::size_t>(std::max(m_nodes, 1)), std::nullopt);
  m_next_job_warning.reset();
  m_last_report.clear();
  m_stopped = !m_timeouts.any();
  m_diagnosing = false;
  m_armed_for.reset();
  arm();
  schedule_look();
}

void HangMonitor::schedule_look() {
  if (m_stopped || !(m_timeouts.progress_timeout || m_timeouts.straggler_timeout)) return;
  m_look_timer.expires_after(look_interval(m_timeouts));
  m_look_timer.async_wait([this](boost::system::error_code ec) {
    if (!ec) look();
  });
}

void HangMonitor::look() {
  if (m_stopped || m_diagnosing) return;
  const auto now = sample_ranks();
  warn_of_a_foreign_rendezvous(now);
  if (judge(now)) return;  // a hang: the diagnosis is under way
  arm();
  schedule_look();
}

HangTime HangMonitor::sample_ranks() {
  const auto readings = m_stacks.read(live_pids());
  const auto now = HangClock::now();
  for (std::size_t i = 0; i < m_ranks.size() && i < readings.size(); ++i) {
    auto& r = m_ranks[i];
    if (!r.alive) continue;
    const auto& reading = readings[i];
    const auto moved = [&r](HangTime t) { r.last_moved = std::max(r.last_moved.value_or(t), t); };
    // A rank whose NCCL collective is pending with nothing completing waits for its GPU: the
    // CPU its host thread spends spinning is no movement.
    bool on_device = false;
    if (reading.sample) {
      moved(from_monotonic(last_moved(m_samples[i], *reading.sample)));
      on_device = waits_on_device(m_samples[i], *reading.sample);
      r.in = waits_in(*reading.sample);
      r.at = reading.sample->at;
      m_samples[i] = reading.sample;
    } else if (m_hooks.store_view) {
      // A rank without a sampler is in a collective when the worker runtime says so.
      const auto view = m_hooks.store_view(static_cast<int>(i));
      r.in = view.collective && view.collective->inside
                 ? view.collective->kind + " #" + std::to_string(view.collective->seq)
                 : std::string();
    }
    if (reading.cpu) {
      auto& before = m_cpu[i];
      if (before && now > before->first) {
        const double span = std::chrono::duration<double>(now - before->first).count();
        if (!on_device && *reading.cpu - before->second >= k_process_cpu_share * span) moved(now);
      }
      before = std::make_pair(now, *reading.cpu);
    }
  }
  return now;
}

void HangMonitor::warn_of_a_foreign_rendezvous(HangTime now) {
  if (!m_warned_rendezvous && m_hooks.store_view) {
    // Only a node that hosts the workers' store knows who connected to it.
    std::vector<bool> connected(m_ranks.size(), false);
    bool known = true;
    for (std::size_t i = 0; i < m_ranks.size(); ++i) {
      const auto arrival = m_hooks.store_view(static_cast<int>(i)).arrival;
      if (!arrival)
        known = false;
      else
        connected[i] = *arrival != Arrival::NeverConnected;
    }
    const Seconds after = std::min(Seconds(30), m_timeouts.progress_timeout.value_or(Seconds(60)) / 2);
    if (known) {
      if (const auto warning =
              foreign_rendezvous_warning(m_ranks, connected, after, now, m_global.empty() ? 0 : m_global.front())) {
        spdlog::warn("{}", *warning);
        m_warned_rendezvous = true;
      }
    }
  }
}

bool HangMonitor::judge(HangTime now) {
  if (m_nodes > 1) {
    // The collectives' hangs are the job's: this node's word goes to the deciding node.
    if (m_hooks.share) m_hooks.share(progress(now));
    return m_decides && look_at_the_job(now);
  } else if (const auto warning =
                 straggler_warning(m_ranks, m_timeouts, now, m_global.empty() ? 0 : m_global.front())) {
    if (!m_next_warning || now >= *m_next_warning) {
      spdlog::warn("{}", *warning);
      if (m_hooks.straggler) m_hooks.straggler(*warning);
      m_next_warning = now + std::chrono::duration_cast<HangClock::duration>(straggler_warning_interval(m_timeouts));
    }
  } else {
    m_next_warning.reset();
  }
  return false;
}

void HangMonitor::set_job(int nodes, int node_rank, int world_size, bool decides) {
  m_nodes = std::max(nodes, 1);
  m_node_rank = node_rank;
  m_world_size = world_size;
  m_decides = decides && m_nodes > 1;
  m_remote.assign(static_cast<std::size_t>(m_nodes), std::nullopt);
}

HangTimeouts HangMonitor::local_timeouts() const {
  auto t = m_timeouts;
  if (m_nodes > 1) {
    t.progress_timeout.reset();
    t.straggler_timeout.reset();
  }
  return t;
}

cluster::NodeProgress HangMonitor::progress(HangTime now) {
  auto p = ranks_at(now);
  p.seq = ++m_progress_seq;
  return p;
}

cluster::NodeProgress HangMonitor::ranks_now() const { return ranks_at(HangClock::now()); }

std::vector<std::pair<cluster::NodeProgress, double>> HangMonitor::others() const {
  std::vector<std::pair<cluster::NodeProgress, double>> out;
  const auto now = HangClock::now();
  for (const auto& r : m_remote) {
    if (r) out.emplace_back(r->progress, std::chrono::duration<double>(now - r->received).count());
  }
  return out;
}

cluster::NodeProgress HangMonitor::ranks_at(HangTime now) const {
  cluster::NodeProgress p;
  p.node_rank = m_node_rank;
  for (std::size_t i = 0; i < m_ranks.size(); ++i) {
    const auto& r = m_ranks[i];
    cluster::RankProgress rp;
    rp.rank = i < m_global.size() ? m_global[i] : static_cast<int>(i);
    rp.alive = r.alive;
    rp.exit_code = r.exit_code;
    rp.still_seconds = std::chrono::duration<double>(now - last_movement(r)).count();
    rp.in = r.in;
    rp.at = r.at;
    if (r.alive && m_samples[i]) rp.groups = m_samples[i]->groups;
    p.ranks.push_back(std::move(rp));
  }
  return p;
}

void HangMonitor::take_progress(const std::vector<cluster::NodeProgress>& nodes) {
  if (m_stopped || !m_decides) return;
  const auto now = HangClock::now();
  for (const auto& p : nodes) {
    if (p.node_rank < 0 || p.node_rank >= m_nodes || p.node_rank == m_node_rank) continue;
    auto& slot = m_remote[static_cast<std::size_t>(p.node_rank)];
    const bool changed = !slot || slot->progress.seq != p.seq;
    if (!changed) continue;
    slot = Remote{p, now, now};
  }
}

std::optional<std::vector<RankActivity>> HangMonitor::job_ranks(HangTime now) const {
  // A node's word is news for a few looks; one that stopped coming is no ground for a verdict
  // (a lost node is its lease's business).
  const auto fresh_for = 3 * look_interval(m_timeouts) + std::chrono::seconds(5);
  std::vector<ReceivedProgress> remote;
  for (int node = 0; node < m_nodes; ++node) {
    if (node == m_node_rank) continue;
    const auto& r = m_remote[static_cast<std::size_t>(node)];
    if (!r || now - r->changed > fresh_for) return std::nullopt;
    remote.push_back({r->progress, r->received});
  }
  return job_activity(m_ranks, m_global, remote, m_world_size, m_attempt_started);
}

bool HangMonitor::look_at_the_job(HangTime now) {
  const auto all = job_ranks(now);
  if (!all) return false;
  HangTimeouts t;
  t.progress_timeout = m_timeouts.progress_timeout;
  t.straggler_timeout = m_timeouts.straggler_timeout;
  if (const auto warning = straggler_warning(*all, t, now, 0)) {
    if (!m_next_job_warning || now >= *m_next_job_warning) {
      spdlog::warn("{}", *warning);
      if (m_hooks.straggler) m_hooks.straggler(*warning);
      m_next_job_warning = now + std::chrono::duration_cast<HangClock::duration>(straggler_warning_interval(t));
    }
  } else {
    m_next_job_warning.reset();
  }
  const auto finding = check_hang(*all, t, now, 0);
  if (!finding) return false;
  diagnose(*finding, true);
  return true;
}

// Output is the hot path: only a time is stored; the timer re-reads it when it fires.
void HangMonitor::on_output(int local_rank) {
  if (auto* r = rank(local_rank)) r->last_output = HangClock::now();
}

void HangMonitor::on_exit(int local_rank, const ExitStatus& status) {
  auto* r = rank(local_rank);
  if (!r) return;
  r->alive = false;
  r->exited_at = HangClock::now();
  if (!status.signaled) r->exit_code = status.value;
  m_status[static_cast<std::size_t>(local_rank)] = status;
  arm();
}

void HangMonitor::on_heartbeat(int local_rank) {
  auto* r = rank(local_rank);
  if (!r) return;
  const bool first = !r->last_heartbeat;
  r->last_heartbeat = HangClock::now();
  if (first) arm();
}

bool HangMonitor::on_section(int local_rank, std::optional<RankSection> section) {
  auto* r = rank(local_rank);
  if (!r) return false;
  // The start is read from the worker's wall clock at each beat: the same section within a second.
  const auto apart = [](HangTime a, HangTime b) { return (a > b ? a - b : b - a) > std::chrono::seconds(1); };
  const bool changed = section.has_value() != r->section.has_value() ||
                       (section && (section->name != r->section->name || section->timeout != r->section->timeout ||
                                    apart(section->since, r->section->since)));
  if (!changed) return false;
  if (r->section && !section) r->section_ended = HangClock::now();
  r->section = std::move(section);
  r->last_progress = HangClock::now();  // entering or leaving a section is progress
  arm();
  return true;
}

void HangMonitor::on_progress(int local_rank) {
  if (auto* r = rank(local_rank)) r->last_progress = HangClock::now();
}

void HangMonitor::on_rendezvous(int local_rank) {
  auto* r = rank(local_rank);
  if (!r) return;
  r->rendezvoused_at = HangClock::now();
  arm();
}

std::vector<pid_t> HangMonitor::live_pids() const {
  std::vector<pid_t> live;
  for (std::size_t i = 0; i < m_pids.size(); ++i) live.push_back(m_ranks[i].alive ? m_pids[i] : -1);
  return live;
}

std::string HangMonitor::last_seen(int local_rank) const {
  if (local_rank < 0 || static_cast<std::size_t>(local_rank) >= m_ranks.size()) return {};
  const auto& r = m_ranks[static_cast<std::size_t>(local_rank)];
  if (r.in.empty() && r.at.empty()) return {};
  std::string out;
  if (!r.in.empty()) out = "in " + call_name(r.in);
  if (!r.at.empty()) out += (out.empty() ? "at " : " at ") + r.at;
  const auto still = std::chrono::duration<double>(m_stopped_at.value_or(HangClock::now()) - last_movement(r)).count();
  if (still >= 1) out += fmt::format(", not moving for {:.0f}s", still);
  return out;
}

std::string HangMonitor::rank_lines() const {
  std::string out;
  for (std::size_t i = 0; i < m_ranks.size(); ++i) {
    if (!m_ranks[i].alive) continue;
    const auto where = last_seen(static_cast<int>(i));
    out += fmt::format("  rank {}: running{}\n", i < m_global.size() ? m_global[i] : static_cast<int>(i),
                       where.empty() ? std::string() : ", " + where);
  }
  return out;
}

void HangMonitor::stop() {
  if (!m_stopped) m_stopped_at = HangClock::now();
  m_stopped = true;
  if (m_diagnosing) m_stacks.cancel();
  m_diagnosing = false;
  m_timer.cancel();
  m_look_timer.cancel();
  m_armed_for.reset();
}

// Activity only ever moves deadlines later, so a timer armed for an earlier deadline is safe:
// when it fires, check_hang() decides and the timer is armed again for the new deadline.
void HangMonitor::arm() {
  if (m_stopped || m_diagnosing) return;
  const auto next = next_check(m_ranks, local_timeouts());
  if (!next || (m_armed_for && *m_armed_for <= *next)) return;
  m_armed_for = next;
  m_timer.expires_at(*next);
  m_timer.async_wait([this](boost::system::error_code ec) {
    if (ec) return;
    m_armed_for.reset();
    on_timer();
  });
}

void HangMonitor::on_timer() {
  if (m_stopped) return;
  if (const auto finding =
          check_hang(m_ranks, local_timeouts(), HangClock::now(), m_global.empty() ? 0 : m_global.front())) {
    diagnose(*finding);
    return;
  }
  arm();
}

}  // namespace rankrun::launcher
