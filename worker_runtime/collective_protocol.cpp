#include "worker_runtime/collective_protocol.hpp"

#include <algorithm>
#include <map>

namespace rankrun::worker {

std::string collective_header(std::string_view kind, std::string_view name) {
  std::string out(kind);
  out += " '";
  out += name;
  out += '\'';
  return out;
}

std::string format_arrival(std::string_view header, std::string_view payload) {
  std::string out(header);
  out += '\n';
  out += payload;
  return out;
}

Arrival parse_arrival(std::string_view value) {
  const std::size_t newline = value.find('\n');
  if (newline == std::string_view::npos) return {std::string(value), {}};
  return {std::string(value.substr(0, newline)), std::string(value.substr(newline + 1))};
}

std::string format_rank_list(const std::vector<int>& ranks) {
  std::vector<int> sorted = ranks;
  std::sort(sorted.begin(), sorted.end());
  std::string out;
  for (std::size_t i = 0; i < sorted.size();) {
    std::size_t j = i;
    while (j + 1 < sorted.size() && sorted[j + 1] == sorted[j] + 1) ++j;
    if (!out.empty()) out += ',';
    if (j - i >= 2) {
      out += std::to_string(sorted[i]) + "-" + std::to_string(sorted[j]);
      i = j + 1;
    } else {
      out += std::to_string(sorted[i]);
      ++i;
    }
  }
  return out;
}

std::optional<std::string> describe_mismatch(const std::vector<std::string>& headers) {
  // Ordered by first rank so the description reads from rank 0 on.
  std::map<std::string, std::vector<int>> by_header;
  std::vector<std::string> order;
  for (std::size_t rank = 0; rank < headers.size(); ++rank) {
    auto [it, inserted] = by_header.try_emplace(headers[rank]);
    if (inserted) order.push_back(headers[rank]);
    it->second.push_back(static_cast<int>(rank));
  }
  if (order.size() <= 1) return std::nullopt;
  std::string out;
  for (const std::string& header : order) {
    const std::vector<int>& ranks = by_header[header];
    if (!out.empty()) out += "; ";
    out += (ranks.size() == 1 ? "rank " : "ranks ") + format_rank_list(ranks) + " called " + header;
  }
  return out;
}

std::string format_duration(std::chrono::milliseconds duration) {
  const auto ms = duration.count();
  if (ms % 1000 == 0) return std::to_string(ms / 1000) + "s";
  return std::to_string(ms) + "ms";
}

std::string timeout_message(std::string_view kind, std::string_view name, std::uint64_t seq,
                            std::chrono::milliseconds timeout, const std::vector<int>& missing, int world_size) {
  std::string out = collective_header(kind, name) + " (#" + std::to_string(seq) + ") timed out after " +
                    format_duration(timeout) + ": ";
  if (missing.empty()) {
    out += "all " + std::to_string(world_size) +
           " ranks arrived but the exchange did not complete "
           "(the last rank to arrive may have died)";
  } else {
    out += (missing.size() == 1 ? "rank " : "ranks ") + format_rank_list(missing) + " of " +
           std::to_string(world_size) + " did not arrive";
  }
  return out;
}

}  // namespace rankrun::worker
