#include "launcher/report/arrival.hpp"

#include <algorithm>

#include "worker_runtime/collective_protocol.hpp"

namespace rankrun::launcher {

std::string ranks_text(const std::vector<int>& ranks) {
  return (ranks.size() == 1 ? "rank " : "ranks ") + rankrun::worker::format_rank_list(ranks);
}

namespace {

// "; 1 connection that reached init_process_group closed before it was matched to its rank".
std::string unmatched_text(const UnmatchedConnections& u) {
  const int all = u.connected + u.rendezvoused;
  std::string out = "; " + std::to_string(all) + (all == 1 ? " connection" : " connections");
  if (u.rendezvoused == all) {
    out += " that reached init_process_group";
  } else if (u.rendezvoused > 0) {
    out += " (" + std::to_string(u.rendezvoused) + " that reached init_process_group)";
  }
  return out +
         (all == 1 ? " closed before it was matched to its rank" : " closed before they were matched to their ranks");
}

}  // namespace

std::string describe_arrivals(const std::vector<Arrival>& by_rank, const std::optional<DuplicateRank>& duplicate,
                              const UnmatchedConnections& unmatched) {
  const bool any_unmatched = unmatched.connected + unmatched.rendezvoused > 0;
  const auto never = [](Arrival a) { return a == Arrival::NeverConnected; };
  if (std::all_of(by_rank.begin(), by_rank.end(), never) && !any_unmatched) return {};
  const bool missing = std::any_of(by_rank.begin(), by_rank.end(), never);
  struct Group {
    Arrival state;
    const char* text;
  };
  const Group groups[] = {{Arrival::Rendezvoused, "reached init_process_group"},
                          {Arrival::Connected, "connected to the store (no init_process_group rendezvous)"},
                          {Arrival::NeverConnected, any_unmatched ? "not matched to a connection" : "never connected"}};
  std::string out;
  for (const auto& g : groups) {
    std::vector<int> ranks;
    for (std::size_t r = 0; r < by_rank.size(); ++r) {
      if (by_rank[r] == g.state) ranks.push_back(static_cast<int>(r));
    }
    if (ranks.empty()) continue;
    if (!out.empty()) out += "; ";
    if (ranks.size() == by_rank.size() && g.state == Arrival::NeverConnected) {
      out += "no rank matched to a connection";  // only with connections unmatched: else nothing is said
    } else if (ranks.size() == by_rank.size() && by_rank.size() > 1 && !duplicate) {
      out += "all ranks " + std::string(g.text);
    } else {
      out += ranks_text(ranks) + " " + g.text;
    }
  }
  // Said only where it may account for a rank that is not seen.
  if (any_unmatched && missing) out += unmatched_text(unmatched);
  if (duplicate) {
    const auto& d = *duplicate;
    const auto group = d.default_group() ? std::string() : " of process group '" + d.group + "'";
    out += "; two workers registered as rank " + std::to_string(d.rank) + group + " (local ranks " +
           std::to_string(d.first) + " and " + std::to_string(d.second) + ")";
    if (!d.unregistered.empty()) {
      out += " and none as " + ranks_text(d.unregistered);
    }
  }
  return out;
}

}  // namespace rankrun::launcher
