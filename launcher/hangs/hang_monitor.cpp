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
  if (m_nodes > 1) {
    // The collectives' hangs are the job's: this node's word goes to the deciding node.
    if (m_hooks.share) m_hooks.share(progress(now));
    if (m_decides && look_at_the_job(now)) return;
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
  arm();
  schedule_look();
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

void HangMonitor::diagnose(const HangFinding& finding, bool job_wide) {
  m_diagnosing = true;
  spdlog::error("hang detected{}: {}; collecting the stacks of the running ranks{}", job_wide ? " across the job" : "",
                finding.reason, job_wide ? " of this node (the other nodes keep their own)" : "");
  m_stacks.collect(live_pids(),
                   [this, finding, job_wide](std::vector<std::string> dumps) { report(finding, dumps, job_wide); });
}

std::optional<FlightDump> HangMonitor::keep_flight_dumps(int local_rank, int rank,
                                                         const std::vector<std::string>& texts) {
  std::optional<FlightDump> merged;
  for (std::size_t k = 0; k < texts.size(); ++k) {
    if (m_attempt_dir) {
      const auto name = std::to_string(local_rank) + (k == 0 ? "/flight_recorder.json" : "/flight_recorder_nccl.json");
      if (const int error = write_new_below(m_attempt_dir.get(), name, texts[k], 0644); error != 0) {
        spdlog::warn("cannot write {}/{} ({}): rank {}'s flight recorder dump is not kept", m_attempt_dir_path, name,
                     std::strerror(error), rank);
      }
    }
    std::string error;
    auto dump = parse_flight_dump(texts[k], error);
    if (!dump) {
      spdlog::warn("rank {}'s flight recorder dump cannot be read: {}", rank, error);
      continue;
    }
    merged = merged ? merge_flight_dumps(std::move(*merged), *dump) : std::move(*dump);
  }
  return merged;
}

std::vector<RankHangState> HangMonitor::local_states(const std::vector<std::string>& dumps,
                                                     std::vector<RankFlight>& flights, bool& any_flight) {
  // The samplers looked again while they wrote the stacks: where each rank is now, not at the
  // last look (a condition such as --exit-timeout can fire between two looks).
  {
    const auto readings = m_stacks.read(live_pids());
    for (std::size_t i = 0; i < m_ranks.size() && i < readings.size(); ++i) {
      if (!readings[i].sample) continue;
      m_ranks[i].in = waits_in(*readings[i].sample);
      m_ranks[i].at = readings[i].sample->at;
      m_samples[i] = readings[i].sample;
    }
  }
  const auto flight = m_stacks.flight_dumps();
  std::vector<RankHangState> states;
  for (std::size_t i = 0; i < m_pids.size(); ++i) {
    RankHangState s;
    s.rank = m_global[i];
    s.alive = m_ranks[i].alive;
    s.status = m_status[i];
    if (s.alive) {
      if (m_samples[i]) {
        s.sampled_in = waits_in(*m_samples[i]);
        s.sampled_at = m_samples[i]->at;
        s.collectives = describe_collectives(*m_samples[i]);
      }
      s.still_for = std::chrono::duration<double>(HangClock::now() - last_movement(m_ranks[i])).count();
    }
    if (m_hooks.store_view) {
      auto view = m_hooks.store_view(static_cast<int>(i));
      s.collective = view.collective;
      s.heartbeat_age = view.heartbeat_age;
      s.step = view.step;
      s.last_key = view.last_key;
      s.arrival = view.arrival;
      s.batches = view.batches;
    }
    if (s.alive && m_ranks[i].section) s.section = section_text(*m_ranks[i].section, HangClock::now());
    if (s.alive) {
      const std::string& dump = i < dumps.size() ? dumps[i] : std::string();
      s.stack_dumped = !dump.empty();
      if (s.stack_dumped) {
        // The dump reaches the console whole, prefixed by rank, and the log dir.
        m_console.write_line(2, s.rank,
                             "stack of rank " + std::to_string(s.rank) + " (pid " + std::to_string(m_pids[i]) + "):",
                             ConsoleOrigin::Rankrun);
        std::istringstream lines(dump);
        for (std::string line; std::getline(lines, line);)
          m_console.write_line(2, s.rank, line, ConsoleOrigin::Rankrun);
        if (m_attempt_dir) {
          // The stack is on the console already; a log dir that cannot take it is said.
          const auto name = std::to_string(i) + "/stacks.txt";
          if (const int error = write_new_below(m_attempt_dir.get(), name, dump, 0644); error != 0) {
            spdlog::warn("cannot write {}/{} ({}): the stack is on the console only", m_attempt_dir_path, name,
                         std::strerror(error));
          }
        }
        s.wait = find_wait_point(parse_faulthandler(dump));
      }
      RankFlight rf{s.rank, std::nullopt, s.sampled_at};
      if (i < flight.size()) rf.dump = keep_flight_dumps(static_cast<int>(i), s.rank, flight[i]);
      any_flight |= rf.dump.has_value();
      flights.push_back(std::move(rf));
    }
    states.push_back(std::move(s));
  }
  return states;
}

void HangMonitor::remote_states(std::vector<RankHangState>& states, std::vector<RankFlight>& flights) const {
  const auto now = HangClock::now();
  for (const auto& remote : m_remote) {
    if (!remote) continue;
    const double age = std::chrono::duration<double>(now - remote->received).count();
    for (const auto& r : remote->progress.ranks) {
      RankHangState s;
      s.rank = r.rank;
      s.node = remote->progress.node_rank;
      s.alive = r.alive;
      if (!r.alive && r.exit_code) s.status = ExitStatus::exited(*r.exit_code);
      if (r.alive) {
        s.sampled_in = r.in;
        s.sampled_at = r.at;
        s.still_for = r.still_seconds + age;
        RankSample sample;
        sample.groups = r.groups;
        s.collectives = describe_collectives(sample);
        flights.push_back({r.rank, summary_flight(r), r.at});
      }
      states.push_back(std::move(s));
    }
  }
}

bool HangMonitor::collect_evidence(std::function<void(const std::string& lines)> done) {
  if (m_stopped || m_diagnosing) return false;
  const auto pids = live_pids();
  if (std::none_of(pids.begin(), pids.end(), [](pid_t p) { return p > 0; })) return false;
  m_diagnosing = true;
  m_timer.cancel();
  m_look_timer.cancel();
  m_stacks.collect(pids, [this, done = std::move(done)](std::vector<std::string> dumps) {
    std::vector<RankFlight> flights;
    bool any_flight = false;
    const auto states = local_states(dumps, flights, any_flight);
    if (any_flight && !m_attempt_dir_path.empty()) {
      spdlog::info("this node's ranks' flight recorder dumps are in {}/<local rank>/flight_recorder*.json",
                   m_attempt_dir_path);
    }
    m_diagnosing = false;
    stop();
    std::string lines;
    for (const auto& s : states) {
      if (s.alive) lines += format_rank_states({s});
    }
    done(lines);
  });
  return true;
}

std::optional<std::string> HangMonitor::collective_timeout(int local_rank) const {
  if (local_rank < 0 || static_cast<std::size_t>(local_rank) >= m_pids.size()) return std::nullopt;
  return m_stacks.collective_timeout(m_pids[static_cast<std::size_t>(local_rank)]);
}

bool HangMonitor::collect_timeout_evidence(int local_rank, std::function<void(const std::string& verdict)> done) {
  if (m_stopped || m_diagnosing || local_rank < 0 || static_cast<std::size_t>(local_rank) >= m_pids.size())
    return false;
  const auto pids = live_pids();
  if (std::none_of(pids.begin(), pids.end(), [](pid_t p) { return p > 0; })) return false;
  m_diagnosing = true;
  m_timer.cancel();
  m_look_timer.cancel();
  m_stacks.collect(pids, [this, local_rank, done = std::move(done)](std::vector<std::string> dumps) {
    std::vector<RankFlight> flights;
    bool any_flight = false;
    local_states(dumps, flights, any_flight);
    // The rank that timed out left its own dump as it died.
    const auto i = static_cast<std::size_t>(local_rank);
    RankFlight own{m_global[i], std::nullopt, m_samples[i] ? m_samples[i]->at : std::string()};
    own.dump = keep_flight_dumps(local_rank, own.rank, m_stacks.flight_dumps_of(m_pids[i]));
    any_flight |= own.dump.has_value();
    flights.push_back(std::move(own));
    std::sort(flights.begin(), flights.end(), [](const auto& a, const auto& b) { return a.rank < b.rank; });
    m_diagnosing = false;
    stop();
    done(any_flight ? match_flight_dumps(flights).text() : std::string());
  });
  return true;
}

void HangMonitor::report(const HangFinding& finding, const std::vector<std::string>& dumps, bool job_wide) {
  std::vector<RankFlight> flights;
  bool any_flight = false;
  auto states = local_states(dumps, flights, any_flight);
  if (job_wide) {
    remote_states(states, flights);
    // hang_verdict() takes the finding's ranks as positions: the job's ranks, in order.
    std::sort(states.begin(), states.end(), [](const auto& a, const auto& b) { return a.rank < b.rank; });
    std::sort(flights.begin(), flights.end(), [](const auto& a, const auto& b) { return a.rank < b.rank; });
    any_flight =
        any_flight || std::any_of(flights.begin(), flights.end(), [](const auto& f) { return f.dump.has_value(); });
  }
  std::string verdict = hang_verdict(finding, states);
  const auto add = [&verdict](const std::string& sentence) {
    if (!sentence.empty())
      verdict += (verdict.empty() ? "" : verdict.back() == '.' || verdict.back() == '?' ? " " : ". ") + sentence;
  };
  if (any_flight) {
    // Collectives matched across the ranks' flight recorders: where they part.
    add(match_flight_dumps(flights).text());
    if (!m_attempt_dir_path.empty()) {
      spdlog::info("the ranks' flight recorder dumps are in {}/<local rank>/flight_recorder*.json", m_attempt_dir_path);
    }
  }
  add(data_note(finding, states));
  m_last_report = "rankrun: HANG: " + finding.reason + "\nrankrun: verdict: " + verdict + "\n";
  std::string text =
      "rankrun: HANG: " + finding.reason + "\n" + format_rank_states(states) + "rankrun: verdict: " + verdict + "\n";
  Console::write_all(2, text);
  m_diagnosing = false;
  m_stopped = true;
  if (m_hooks.hung) m_hooks.hung();
}

}  // namespace rankrun::launcher
