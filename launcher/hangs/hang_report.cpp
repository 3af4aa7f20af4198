#include "launcher/hangs/hang_report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "launcher/report/arrival.hpp"

namespace rankrun::launcher {

std::string call_name(const std::string& in) { return in == "backward" ? "DDP backward (gradient all-reduce)" : in; }

namespace {

// What a rank is waiting in: the runtime's record, else its sampler's, else its stack's.
std::string waiting_in(const RankHangState& r) {
  if (r.collective && r.collective->inside) return fmt::format("{} #{}", r.collective->kind, r.collective->seq);
  if (!r.sampled_in.empty()) return call_name(r.sampled_in);
  if (r.wait && !r.wait->collective.empty()) return r.wait->collective;
  return {};
}

std::string where_at(const RankHangState& r) {
  if (!r.sampled_at.empty()) return r.sampled_at;
  return r.wait ? r.wait->user_frame : std::string();
}

std::string last_done(const RankHangState& r) {
  if (!r.collective) return {};
  const auto done = r.collective->inside ? r.collective->seq - 1 : r.collective->seq;
  return done > 0 ? fmt::format(" after #{}", done) : std::string();
}

}  // namespace

std::string format_rank_states(const std::vector<RankHangState>& ranks) {
  std::string out;
  for (const auto& r : ranks) {
    std::string line =
        r.node ? fmt::format("  rank {} (node {}): ", r.rank, *r.node) : fmt::format("  rank {}: ", r.rank);
    if (!r.alive) {
      line += r.status ? (r.status->signaled ? "killed by " + r.status->describe()
                                             : "exited " + std::to_string(r.status->value))
                       : "exited";
    } else {
      line += "running";
      const auto in = r.sampled_in.empty() ? (r.wait ? r.wait->collective : std::string()) : call_name(r.sampled_in);
      const auto where = where_at(r);
      if (!in.empty()) line += ", in " + in;
      if (!where.empty()) line += " at " + where;
      if (r.still_for && *r.still_for >= 1) line += fmt::format(", not moving for {:.0f}s", *r.still_for);
      if (!r.wait && !r.stack_dumped && !r.node) line += " (no stack dump)";
    }
    if (r.collective) {
      line += fmt::format("; runtime: {} #{} {}{}", r.collective->kind, r.collective->seq,
                          r.collective->inside ? "(inside)" : "(done)",
                          r.collective->name.empty() ? "" : " '" + r.collective->name + "'");
    }
    if (!r.collectives.empty()) line += "; flight recorder: " + r.collectives;
    if (r.heartbeat_age) line += fmt::format("; heartbeat {:.0f}s ago", *r.heartbeat_age);
    if (r.step && *r.step >= 0) line += fmt::format(", step {}", *r.step);
    if (!r.section.empty()) line += "; in " + r.section;
    if (r.batches)
      line += fmt::format("; batches {} of {} in epoch {}", r.batches->read, r.batches->planned, r.batches->epoch);
    if (!r.last_key.empty()) line += "; last store key " + r.last_key;
    out += line + '\n';
  }
  return out;
}

std::string hang_verdict(const HangFinding& finding, const std::vector<RankHangState>& ranks) {
  // Positions in `ranks` (local ranks, as finding.stuck); messages name the global ranks.
  std::vector<int> alive;
  std::vector<int> finished;
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i].alive)
      alive.push_back(static_cast<int>(i));
    else if (ranks[i].status && ranks[i].status->success())
      finished.push_back(static_cast<int>(i));
  }
  const auto named = [&ranks](const std::vector<int>& positions) {
    std::vector<int> global;
    for (int i : positions) global.push_back(ranks[static_cast<std::size_t>(i)].rank);
    return ranks_text(global);
  };
  // Group the live ranks by what they wait in.
  std::map<std::string, std::vector<int>> by_wait;
  for (const auto& r : ranks) {
    if (r.alive) by_wait[waiting_in(r)].push_back(r.rank);
  }

  switch (finding.kind) {
    case HangKind::Outsider: {
      std::vector<int> inside;
      std::string outsiders;
      for (int i : alive) {
        const auto& r = ranks[static_cast<std::size_t>(i)];
        if (std::find(finding.stuck.begin(), finding.stuck.end(), i) != finding.stuck.end()) {
          const auto where = where_at(r);
          outsiders += fmt::format("{}rank {} ({})", outsiders.empty() ? "" : ", ", r.rank,
                                   where.empty() ? "outside any collective" : "at " + where);
        } else {
          inside.push_back(i);
        }
      }
      std::string in;
      for (const auto& [call, rs] : by_wait) {
        if (!call.empty()) in += (in.empty() ? "" : ", ") + call;
      }
      return fmt::format(
          "{} {} in {} for {}, which never joined them: a rank that skipped a collective, or that is "
          "stuck in I/O or an endless loop?",
          named(inside), inside.size() == 1 ? "waits" : "wait", in, outsiders);
    }
    case HangKind::Collectives:
      if (finished.empty()) break;
      [[fallthrough]];
    case HangKind::Straggler: {
      const auto& stuck = ranks[static_cast<std::size_t>(alive.front())];
      const auto in = waiting_in(stuck);
      std::string done;
      if (!finished.empty()) done = last_done(ranks[static_cast<std::size_t>(finished.front())]);
      return fmt::format("{} {} {} while {} exited 0{}: uneven inputs? Every rank must run the same collectives.",
                         named(alive), alive.size() == 1 ? "is" : "are", in.empty() ? "still running" : "in " + in,
                         named(finished), done);
    }
    case HangKind::LateArrival: {
      std::string where;
      if (finding.stuck.size() == 1) {
        const auto& r = ranks[static_cast<std::size_t>(finding.stuck.front())];
        if (r.wait && !r.wait->user_frame.empty()) where = " (it is at " + r.wait->user_frame + ")";
      }
      std::vector<int> waiting;
      for (int r : alive) {
        if (std::find(finding.stuck.begin(), finding.stuck.end(), r) == finding.stuck.end()) waiting.push_back(r);
      }
      return fmt::format(
          "{} never reached init_process_group{} while {} waited there: slow start (data loading, "
          "a sleep) or a rank that takes another path?",
          named(finding.stuck), where, named(waiting));
    }
    case HangKind::SectionOverrun:
      return fmt::format(
          "{} stayed in a section past the timeout it declared: a write or read that never ends (a file "
          "system, a network), or a timeout too short for it (rankrun.progress.section(name, timeout=...))?",
          named(finding.stuck));
    case HangKind::HeartbeatLost:
      return fmt::format(
          "{} stopped heartbeating: the process is stuck (a deadlock, a stopped process, a blocked "
          "system call) rather than waiting for its peers.",
          named(finding.stuck));
  }
  if (by_wait.size() > 1) {
    std::string parts;
    for (const auto& [in, rs] : by_wait) {
      if (!parts.empty()) parts += ", ";
      parts += ranks_text(rs) + " in " + (in.empty() ? "no collective" : in);
    }
    return "ranks are in different collectives (" + parts +
           "): mismatched collectives? Every rank must call the same ones in the same order.";
  }
  const auto in = by_wait.empty() ? std::string() : by_wait.begin()->first;
  if (in == "init_process_group" && std::all_of(alive.begin(), alive.end(), [&ranks](int i) {
        return ranks[static_cast<std::size_t>(i)].arrival == Arrival::NeverConnected;
      })) {
    return "every running rank waits in init_process_group, and none connected to rankrun's store: " +
           std::string(k_foreign_rendezvous);
  }
  return in.empty() ? "no rank makes progress: a deadlock, or a peer outside this job?"
                    : "every running rank waits in " + in +
                          " and none makes progress: a peer outside this node, or a deadlock inside the collective?";
}

std::string data_note(const HangFinding& finding, const std::vector<RankHangState>& ranks) {
  // Ranks that ran different numbers of collectives: one exited 0 while others wait, or they
  // wait in different collectives or at different points of the runtime's sequence.
  bool finished = false;
  std::map<std::string, int> waits;
  std::map<std::uint64_t, int> seqs;
  for (const auto& r : ranks) {
    if (!r.alive && r.status && r.status->success()) finished = true;
    if (!r.alive) continue;
    ++waits[waiting_in(r)];
    if (r.collective) ++seqs[r.collective->seq];
  }
  const bool uneven = finding.kind == HangKind::Straggler || finished || waits.size() > 1 || seqs.size() > 1;
  if (!uneven || finding.kind == HangKind::LateArrival || finding.kind == HangKind::HeartbeatLost ||
      finding.kind == HangKind::SectionOverrun)
    return {};
  // Ranks grouped by their count, in the latest epoch any of them reported.
  std::optional<std::uint64_t> epoch;
  for (const auto& r : ranks) {
    if (r.batches) epoch = std::max(epoch.value_or(r.batches->epoch), r.batches->epoch);
  }
  if (!epoch) {
    return "If the ranks read different numbers of batches: rankrun.data.even_batches(loader) gives every rank the "
           "same number (Python; the worker runtime's join() in C++).";
  }
  std::map<std::pair<std::uint64_t, std::uint64_t>, std::vector<int>> by_count;
  std::vector<int> behind;  // still in an earlier epoch, or never said
  for (const auto& r : ranks) {
    if (r.batches && r.batches->epoch == *epoch)
      by_count[{r.batches->read, r.batches->planned}].push_back(r.rank);
    else
      behind.push_back(r.rank);
  }
  std::string counts;
  for (const auto& [count, rs] : by_count)
    counts += fmt::format("{}{} {} of {}", counts.empty() ? "" : ", ", ranks_text(rs), count.first, count.second);
  if (!behind.empty()) counts += fmt::format(", {} in an earlier epoch or not using rankrun.data", ranks_text(behind));
  return fmt::format("Batches read in epoch {} (rankrun.data): {}.", *epoch, counts);
}

}  // namespace rankrun::launcher
