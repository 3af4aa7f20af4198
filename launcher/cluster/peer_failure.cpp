#include "launcher/cluster/peer_failure.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <string_view>

namespace rankrun::launcher::cluster {
namespace {

// Lower-case phrases of a lost connection, as gloo, NCCL and the socket layer print them.
constexpr std::array<std::string_view, 5> k_connection_lost{"closed by peer", "reset by peer", "closed by remote peer",
                                                            "remote process exited", "broken pipe"};

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

bool address_char(char c) { return std::isxdigit(static_cast<unsigned char>(c)) || c == '.' || c == ':'; }

// `line` names `host` as a whole address: not as a part of a longer one (10.0.0.3 in 10.0.0.31).
bool names_address(std::string_view line, std::string_view host) {
  if (host.empty()) return false;
  for (auto at = line.find(host); at != std::string_view::npos; at = line.find(host, at + 1)) {
    const bool start = at == 0 || !address_char(line[at - 1]);
    const auto end = at + host.size();
    // An IPv4 address may be followed by ":port"; a following digit or dot makes it another one.
    const bool stop = end == line.size() || !(std::isdigit(static_cast<unsigned char>(line[end])) || line[end] == '.');
    if (start && stop) return true;
  }
  return false;
}

}  // namespace

std::optional<int> peer_node_named(const std::deque<std::string>& stderr_tail, const NodeMap& map, int self) {
  for (auto it = stderr_tail.rbegin(); it != stderr_tail.rend(); ++it) {
    const auto l = lower(*it);
    if (std::none_of(k_connection_lost.begin(), k_connection_lost.end(),
                     [&](std::string_view p) { return l.find(p) != std::string::npos; })) {
      continue;
    }
    for (const auto& node : map.nodes) {
      if (node.node_rank != self && names_address(*it, node.host)) return node.node_rank;
    }
  }
  return std::nullopt;
}

}  // namespace rankrun::launcher::cluster
