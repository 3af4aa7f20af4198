#include "launcher/hangs/job_view.hpp"

#include <algorithm>

namespace rankrun::launcher {

std::optional<std::vector<RankActivity>> job_activity(const std::vector<RankActivity>& local,
                                                      const std::vector<int>& global,
                                                      const std::vector<ReceivedProgress>& remote, int world_size,
                                                      HangTime attempt_started) {
  if (world_size <= 0) return std::nullopt;
  std::vector<RankActivity> all(static_cast<std::size_t>(world_size));
  std::vector<bool> known(all.size(), false);
  const auto put = [&](int rank, RankActivity a) {
    if (rank < 0 || rank >= world_size) return;
    all[static_cast<std::size_t>(rank)] = std::move(a);
    known[static_cast<std::size_t>(rank)] = true;
  };
  for (std::size_t i = 0; i < local.size() && i < global.size(); ++i) put(global[i], local[i]);
  for (const auto& node : remote) {
    for (const auto& r : node.progress.ranks) {
      RankActivity a;
      a.alive = r.alive;
      a.exit_code = r.exit_code;
      a.started = attempt_started;
      const auto moved = node.received - std::chrono::duration_cast<HangClock::duration>(
                                             std::chrono::duration<double>(r.still_seconds));
      a.last_moved = moved;
      if (!r.alive) a.exited_at = moved;
      a.in = r.in;
      a.at = r.at;
      put(r.rank, std::move(a));
    }
  }
  if (std::find(known.begin(), known.end(), false) != known.end()) return std::nullopt;
  return all;
}

std::optional<FlightDump> summary_flight(const cluster::RankProgress& rank) {
  if (rank.groups.empty()) return std::nullopt;
  FlightDump d;
  for (const auto& g : rank.groups) {
    d.groups.push_back({g.name, g.enqueued, g.started, g.completed});
    if (!g.pending()) continue;
    FlightEntry e;
    e.group = g.name;
    e.desc = g.desc;
    e.seq = g.first_pending();
    e.op = g.op.empty() ? std::string("collective") : op_name(g.op);
    e.backend = g.op.substr(0, g.op.find(':'));
    e.sizes_known = false;
    d.entries.push_back(std::move(e));
  }
  return d;
}

}  // namespace rankrun::launcher
