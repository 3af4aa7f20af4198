// HangMonitor's evidence: once a hang is found, every rank's stacks and flight recorder dumps
// (this node's, and the other nodes' in their progress records), the verdict that names the
// rank the others wait for, and the report. The sampling and the judging are in hang_monitor.cpp.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cstring>
#include <sstream>

#include "launcher/files/run_dir.hpp"
#include "launcher/hangs/flight_match.hpp"
#include "launcher/hangs/hang_monitor.hpp"
#include "launcher/hangs/job_view.hpp"
#include "launcher/hangs/stack_dump.hpp"

namespace rankrun::launcher {

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

void HangMonitor::read_samples_again() {
  // The samplers looked again while they wrote the stacks: where each rank is now, not at the
  // last look (a condition such as --exit-timeout can fire between two looks).
  const auto readings = m_stacks.read(live_pids());
  for (std::size_t i = 0; i < m_ranks.size() && i < readings.size(); ++i) {
    if (!readings[i].sample) continue;
    m_ranks[i].in = waits_in(*readings[i].sample);
    m_ranks[i].at = readings[i].sample->at;
    m_samples[i] = readings[i].sample;
  }
}

RankHangState HangMonitor::watched_state(std::size_t i) const {
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
    if (m_ranks[i].section) s.section = section_text(*m_ranks[i].section, HangClock::now());
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
  return s;
}

void HangMonitor::keep_stack(std::size_t i, RankHangState& s, const std::string& dump) {
  s.stack_dumped = !dump.empty();
  if (!s.stack_dumped) return;
  // The dump reaches the console whole, prefixed by rank, and the log dir.
  m_console.write_line(
      2, s.rank,
      "stack of rank " + std::to_string(s.rank) + " (pid " + std::to_string(m_pids[i]) + "):", ConsoleOrigin::Rankrun);
  std::istringstream lines(dump);
  for (std::string line; std::getline(lines, line);) m_console.write_line(2, s.rank, line, ConsoleOrigin::Rankrun);
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

std::vector<RankHangState> HangMonitor::local_states(const std::vector<std::string>& dumps,
                                                     std::vector<RankFlight>& flights, bool& any_flight) {
  read_samples_again();
  const auto flight = m_stacks.flight_dumps();
  std::vector<RankHangState> states;
  for (std::size_t i = 0; i < m_pids.size(); ++i) {
    RankHangState s = watched_state(i);
    if (s.alive) {
      keep_stack(i, s, i < dumps.size() ? dumps[i] : std::string());
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
