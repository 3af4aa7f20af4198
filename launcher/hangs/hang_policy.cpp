#include "launcher/hangs/hang_policy.hpp"

#include <algorithm>
#include <fmt/format.h>

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

// A heartbeat proves a rank alive, not that it gets anywhere: only output, a new step or a
// collective entered or left count as progress.
HangTime latest_activity(const RankActivity& r) {
  HangTime t = r.started;
  for (const auto& x : {r.last_output, r.last_progress}) {
    if (x) t = std::max(t, *x);
  }
  return t;
}

// Each condition that is armed, with the moment it started holding.
std::vector<Candidate> candidates(const std::vector<RankActivity>& ranks, const HangTimeouts& t) {
  std::vector<Candidate> out;
  const auto alive = alive_ranks(ranks);
  if (alive.empty()) return out;

  if (t.exit_timeout) {
    std::optional<HangTime> first_success;
    for (const auto& r : ranks) {
      if (!r.alive && r.exit_code == 0 && r.exited_at) first_success = std::min(first_success.value_or(*r.exited_at), *r.exited_at);
    }
    if (first_success) out.push_back({HangKind::Straggler, *first_success, *t.exit_timeout});
  }
  if (t.heartbeat_timeout) {
    for (int i : alive) {
      const auto& r = ranks[static_cast<std::size_t>(i)];
      if (r.last_heartbeat) out.push_back({HangKind::HeartbeatLost, *r.last_heartbeat, *t.heartbeat_timeout});
    }
  }
  if (t.progress_timeout) {
    HangTime last = HangTime::min();
    for (const auto& r : ranks) last = std::max(last, r.alive ? latest_activity(r) : r.exited_at.value_or(r.started));
    out.push_back({HangKind::NoProgress, last, *t.progress_timeout});
  }
  if (t.init_timeout) {
    std::optional<HangTime> first_arrival;
    bool someone_missing = false;
    for (const auto& r : ranks) {
      if (r.rendezvoused_at) first_arrival = std::min(first_arrival.value_or(*r.rendezvoused_at), *r.rendezvoused_at);
      else if (r.alive) someone_missing = true;
    }
    if (first_arrival && someone_missing) out.push_back({HangKind::LateArrival, *first_arrival, *t.init_timeout});
  }
  return out;
}

std::string seconds_text(Seconds s) { return fmt::format("{:.0f}s", s.count()); }

}  // namespace

std::optional<HangTime> next_check(const std::vector<RankActivity>& ranks, const HangTimeouts& timeouts) {
  std::optional<HangTime> next;
  for (const auto& c : candidates(ranks, timeouts)) {
    const auto at = c.since + std::chrono::duration_cast<HangClock::duration>(c.timeout);
    next = std::min(next.value_or(at), at);
  }
  return next;
}

std::optional<HangFinding> check_hang(const std::vector<RankActivity>& ranks, const HangTimeouts& timeouts, HangTime now,
                                      int first_rank) {
  const auto named = [first_rank](std::vector<int> local) {
    for (auto& r : local) r += first_rank;
    return ranks_text(local);
  };
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
      case HangKind::Straggler:
        f.stuck = alive;
        f.reason = fmt::format("{} exited 0 {} ago; {} still running (--exit-timeout={})",
                               named(exited_ok), seconds_text(waited),
                               named(alive), seconds_text(c.timeout));
        break;
      case HangKind::HeartbeatLost:
        for (int i : alive) {
          const auto& r = ranks[static_cast<std::size_t>(i)];
          if (r.last_heartbeat && now - *r.last_heartbeat >= c.timeout) f.stuck.push_back(i);
        }
        f.reason = fmt::format("{} sent no heartbeat for {} (--heartbeat-timeout={})",
                               named(f.stuck), seconds_text(waited),
                               seconds_text(c.timeout));
        break;
      case HangKind::NoProgress:
        f.stuck = alive;
        f.reason = fmt::format("no output, step or collective from any rank for {} (--progress-timeout={})",
                               seconds_text(waited), seconds_text(c.timeout));
        break;
      case HangKind::LateArrival: {
        std::vector<int> arrived;
        for (std::size_t i = 0; i < ranks.size(); ++i) {
          if (ranks[i].rendezvoused_at) arrived.push_back(static_cast<int>(i));
          else if (ranks[i].alive) f.stuck.push_back(static_cast<int>(i));
        }
        f.reason = fmt::format("{} never reached the rendezvous; {} waited there for {} (--init-timeout={})",
                               named(f.stuck),
                               named(arrived), seconds_text(waited),
                               seconds_text(c.timeout));
        break;
      }
    }
    return f;
  }
  return std::nullopt;
}

}  // namespace rankrun::launcher
