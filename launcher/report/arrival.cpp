#include "launcher/arrival.hpp"

#include <algorithm>

namespace rankrun::launcher {

std::string rank_ranges(const std::vector<int>& ranks) {
  std::string out;
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(ranks[i]);
    if (j > i) out += (j == i + 1 ? "," : "-") + std::to_string(ranks[j]);
    i = j + 1;
  }
  return out;
}

std::string describe_arrivals(const std::vector<Arrival>& by_rank) {
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
    if (ranks.size() == by_rank.size() && by_rank.size() > 1) {
      out += "all ranks " + std::string(g.text);
    } else {
      out += (ranks.size() == 1 ? "rank " : "ranks ") + rank_ranges(ranks) + " " + g.text;
    }
  }
  return out;
}

}  // namespace rankrun::launcher
