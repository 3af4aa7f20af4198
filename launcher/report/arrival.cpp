#include "launcher/report/arrival.hpp"

#include <algorithm>

#include "worker_runtime/collective_protocol.hpp"

namespace rankrun::launcher {

std::string ranks_text(const std::vector<int>& ranks) {
  return (ranks.size() == 1 ? "rank " : "ranks ") + rankrun::worker::format_rank_list(ranks);
}

std::string describe_arrivals(const std::vector<Arrival>& by_rank, const std::optional<DuplicateRank>& duplicate) {
  if (std::all_of(by_rank.begin(), by_rank.end(), [](Arrival a) { return a == Arrival::NeverConnected; })) return {};
  struct Group {
    Arrival state;
    const char* text;
  };
  const Group groups[] = {{Arrival::Rendezvoused, "reached init_process_group"},
                          {Arrival::Connected, "connected to the store (no init_process_group rendezvous)"},
                          {Arrival::NeverConnected, "never connected"}};
  std::string out;
  for (const auto& g : groups) {
    std::vector<int> ranks;
    for (std::size_t r = 0; r < by_rank.size(); ++r) {
      if (by_rank[r] == g.state) ranks.push_back(static_cast<int>(r));
    }
    if (ranks.empty()) continue;
    if (!out.empty()) out += "; ";
    if (ranks.size() == by_rank.size() && by_rank.size() > 1 && !duplicate) {
      out += "all ranks " + std::string(g.text);
    } else {
      out += ranks_text(ranks) + " " + g.text;
    }
  }
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
