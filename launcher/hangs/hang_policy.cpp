#include "launcher/hangs/hang_policy.hpp"

#include <algorithm>
#include <fmt/format.h>
#include <map>

#include "launcher/report/arrival.hpp"

namespace rankrun::launcher {
namespace {

struct Candidate {
  HangKind kind;
  HangTime since;  // when the condition started
  Seconds timeout;
};

std::vector<int> alive_ranks(const std::vector<RankActivity>& ranks) {
  std::vector<int> out;
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i].alive) out.push_back(static_cast<int>(i));
  }
  return out;
}

const RankActivity& at(const std::vector<RankActivity>& ranks, int i) { return ranks[static_cast<std::size_t>(i)]; }

// A rank inside a section it declared counts as moving until the section's deadline.
HangTime covered_until(const RankActivity& r) {
  const HangTime moved = last_movement(r);
  return r.section ? std::max(moved, r.section->deadline()) : moved;
}

// The latest section deadline, or end of a section, among `ranks` (positions), or `t`: what a
// rank in a section makes the others wait for does not count until it has left.
HangTime after_sections(const std::vector<RankActivity>& ranks, const std::vector<int>& positions, HangTime t) {
  for (int i : positions) {
    const auto& r = at(ranks, i);
    if (r.section) t = std::max(t, r.section->deadline());
    if (r.section_ended) t = std::max(t, *r.section_ended);
  }
  return t;
}

// The running ranks in collectives and those outside, and since when the former have all been
// still (the latest movement among them).
struct Waiting {
  std::vector<int> inside, outside;
  HangTime still_since{};
};

Waiting waiting(const std::vector<RankActivity>& ranks) {
  Waiting w;
  for (int i : alive_ranks(ranks)) {
    const auto& r = at(ranks, i);
    if (r.in.empty()) {
      w.outside.push_back(i);
      continue;
    }
    w.inside.push_back(i);
    w.still_since = std::max(w.still_since, covered_until(r));
  }
  return w;
}

// Each condition that is armed, with the moment it started holding.
std::vector<Candidate> candidates(const std::vector<RankActivity>& ranks, const HangTimeouts& t) {
  std::vector<Candidate> out;
  const auto alive = alive_ranks(ranks);
  if (alive.empty()) return out;

  const auto w = waiting(ranks);
  if (t.progress_timeout && !w.inside.empty() && w.outside.empty()) {
    out.push_back({HangKind::Collectives, w.still_since, *t.progress_timeout});
  }
  if (t.straggler_timeout && !w.inside.empty() && !w.outside.empty()) {
    out.push_back({HangKind::Outsider, after_sections(ranks, w.outside, w.still_since), *t.straggler_timeout});
  }
  if (t.exit_timeout) {
    std::optional<HangTime> first_success;
    for (const auto& r : ranks) {
      if (!r.alive && r.exit_code == 0 && r.exited_at)
        first_success = std::min(first_success.value_or(*r.exited_at), *r.exited_at);
    }
    if (first_success)
      out.push_back({HangKind::Straggler, after_sections(ranks, alive, *first_success), *t.exit_timeout});
  }
  if (t.heartbeat_timeout) {
    for (int i : alive) {
      const auto& r = at(ranks, i);
      if (r.last_heartbeat)
        out.push_back({HangKind::HeartbeatLost, after_sections(ranks, {i}, *r.last_heartbeat), *t.heartbeat_timeout});
    }
  }
  if (t.progress_timeout || t.heartbeat_timeout) {
    for (int i : alive) {
      if (const auto& s = at(ranks, i).section) out.push_back({HangKind::SectionOverrun, s->since, s->timeout});
    }
  }
  if (t.init_timeout) {
    std::optional<HangTime> first_arrival;
    bool someone_missing = false;
    for (const auto& r : ranks) {
      if (r.rendezvoused_at)
        first_arrival = std::min(first_arrival.value_or(*r.rendezvoused_at), *r.rendezvoused_at);
      else if (r.alive)
        someone_missing = true;
    }
    if (first_arrival && someone_missing) out.push_back({HangKind::LateArrival, *first_arrival, *t.init_timeout});
  }
  return out;
}

std::string seconds_text(Seconds s) { return fmt::format("{:.0f}s", s.count()); }

std::vector<int> global(std::vector<int> local, int first_rank) {
  for (auto& r : local) r += first_rank;
  return local;
}

// "barrier" for ranks all in one; "rank 0 in barrier, rank 1 in all_reduce" otherwise.
std::string where_they_wait(const std::vector<RankActivity>& ranks, const std::vector<int>& inside, int first_rank) {
  std::map<std::string, std::vector<int>> by_call;
  for (int i : inside) by_call[at(ranks, i).in].push_back(i + first_rank);
  if (by_call.size() == 1) return by_call.begin()->first;
  std::string out;
  for (const auto& [call, rs] : by_call) out += (out.empty() ? "" : ", ") + ranks_text(rs) + " in " + call;
  return "collectives (" + out + ")";
}

}  // namespace

HangTime last_movement(const RankActivity& r) {
  HangTime t = r.started;
  for (const auto& x : {r.last_output, r.last_progress, r.last_moved}) {
    if (x) t = std::max(t, *x);
  }
  return t;
}

std::string section_text(const RankSection& section, HangTime now) {
  return fmt::format("section '{}' for {} of {}", section.name, seconds_text(now - section.since),
                     seconds_text(section.timeout));
}

std::optional<HangTime> next_check(const std::vector<RankActivity>& ranks, const HangTimeouts& timeouts) {
  std::optional<HangTime> next;
  for (const auto& c : candidates(ranks, timeouts)) {
    const auto at = c.since + std::chrono::duration_cast<HangClock::duration>(c.timeout);
    next = std::min(next.value_or(at), at);
  }
  return next;
}

std::optional<HangFinding> check_hang(const std::vector<RankActivity>& ranks, const HangTimeouts& timeouts,
                                      HangTime now, int first_rank) {
  const auto named = [first_rank](const std::vector<int>& local) { return ranks_text(global(local, first_rank)); };
  for (const auto& c : candidates(ranks, timeouts)) {
    const Seconds waited = now - c.since;
    if (waited < c.timeout) continue;
    HangFinding f{c.kind, {}, waited, {}};
    const auto alive = alive_ranks(ranks);
    std::vector<int> exited_ok;
    for (std::size_t i = 0; i < ranks.size(); ++i) {
      if (!ranks[i].alive && ranks[i].exit_code == 0) exited_ok.push_back(static_cast<int>(i));
    }
    switch (c.kind) {
      case HangKind::Collectives: {
        f.stuck = alive;
        f.reason = fmt::format("{} {} been blocked in {} for {} (--progress-timeout={})", named(alive),
                               alive.size() == 1 ? "has" : "have", where_they_wait(ranks, alive, first_rank),
                               seconds_text(waited), seconds_text(c.timeout));
        break;
      }
      case HangKind::Outsider: {
        const auto w = waiting(ranks);
        f.stuck = w.outside;
        f.reason = fmt::format(
            "{} {} been blocked in {} for {} while {} {} outside any collective (--straggler-timeout={})",
            named(w.inside), w.inside.size() == 1 ? "has" : "have", where_they_wait(ranks, w.inside, first_rank),
            seconds_text(waited), named(w.outside), w.outside.size() == 1 ? "is" : "are", seconds_text(c.timeout));
        break;
      }
      case HangKind::Straggler:
        f.stuck = alive;
        f.reason = fmt::format("{} exited 0 {} ago; {} still running (--exit-timeout={})", named(exited_ok),
                               seconds_text(waited), named(alive), seconds_text(c.timeout));
        break;
      case HangKind::HeartbeatLost:
        for (int i : alive) {
          const auto& r = at(ranks, i);
          if (r.last_heartbeat && now - after_sections(ranks, {i}, *r.last_heartbeat) >= c.timeout)
            f.stuck.push_back(i);
        }
        f.reason = fmt::format("{} sent no heartbeat for {} (--heartbeat-timeout={})", named(f.stuck),
                               seconds_text(waited), seconds_text(c.timeout));
        break;
      case HangKind::LateArrival: {
        std::vector<int> arrived;
        for (std::size_t i = 0; i < ranks.size(); ++i) {
          if (ranks[i].rendezvoused_at)
            arrived.push_back(static_cast<int>(i));
          else if (ranks[i].alive)
            f.stuck.push_back(static_cast<int>(i));
        }
        f.reason = fmt::format("{} never reached the rendezvous; {} waited there for {} (--init-timeout={})",
                               named(f.stuck), named(arrived), seconds_text(waited), seconds_text(c.timeout));
        break;
      }
      case HangKind::SectionOverrun: {
        std::string sections;
        for (int i : alive) {
          const auto& s = at(ranks, i).section;
          if (!s || now < s->deadline()) continue;
          f.stuck.push_back(i);
          sections +=
              fmt::format("{}rank {} in {}", sections.empty() ? "" : ", ", i + first_rank, section_text(*s, now));
        }
        f.reason = fmt::format("{}: past the timeout the section declared", sections);
        break;
      }
    }
    return f;
  }
  return std::nullopt;
}

Seconds straggler_warning_interval(const HangTimeouts& timeouts) {
  const double third = timeouts.progress_timeout ? timeouts.progress_timeout->count() / 3 : 60.0;
  return Seconds(std::clamp(third, 1.0, 60.0));
}

std::optional<std::string> straggler_warning(const std::vector<RankActivity>& ranks, const HangTimeouts& timeouts,
                                             HangTime now, int first_rank) {
  const auto w = waiting(ranks);
  if (w.inside.empty() || w.outside.empty()) return std::nullopt;
  const Seconds waited = now - w.still_since;
  const auto interval = straggler_warning_interval(timeouts);
  if (waited < interval) return std::nullopt;
  std::string outsiders;
  for (int i : w.outside) {
    const auto& r = at(ranks, i);
    const Seconds still = now - last_movement(r);
    if (r.section && now < r.section->deadline()) {
      outsiders += fmt::format("{}rank {} is in {}", outsiders.empty() ? "" : "; ", i + first_rank,
                               section_text(*r.section, now));
      continue;
    }
    outsiders += fmt::format("{}rank {} is outside the collectives{} ({})", outsiders.empty() ? "" : "; ",
                             i + first_rank, r.at.empty() ? "" : " at " + r.at,
                             still < interval ? std::string("working") : "not moving for " + seconds_text(still));
  }
  const auto then = timeouts.straggler_timeout
                        ? "; a hang after --straggler-timeout=" + seconds_text(*timeouts.straggler_timeout)
                        : std::string();
  return fmt::format("straggler: {} while {} {} in {} for {}{}", outsiders, ranks_text(global(w.inside, first_rank)),
                     w.inside.size() == 1 ? "waits" : "wait", where_they_wait(ranks, w.inside, first_rank),
                     seconds_text(waited), then);
}

std::optional<std::string> foreign_rendezvous_warning(const std::vector<RankActivity>& ranks,
                                                      const std::vector<bool>& connected, Seconds after, HangTime now,
                                                      int first_rank) {
  std::vector<int> waiting;
  std::optional<Seconds> least;
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    if (i < connected.size() && connected[i]) return std::nullopt;
    const auto& r = ranks[i];
    if (!r.alive || r.in != "init_process_group") continue;
    const Seconds still = now - last_movement(r);
    least = std::min(least.value_or(still), still);
    waiting.push_back(static_cast<int>(i));
  }
  if (waiting.empty() || *least < after) return std::nullopt;
  return fmt::format("{} {} been in init_process_group for {} and none connected to rankrun's store: {}",
                     ranks_text(global(waiting, first_rank)), waiting.size() == 1 ? "has" : "have",
                     seconds_text(*least), k_foreign_rendezvous);
}

}  // namespace rankrun::launcher
