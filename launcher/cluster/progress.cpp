#include "launcher/cluster/progress.hpp"

#include "base/parse_number.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace rankrun::launcher::cluster {
namespace {

constexpr std::size_t k_max_field = 256;

// A field holds no tab or line end, and "-" stands for empty.
std::string encode_field(std::string_view v) {
  if (v.empty()) return "-";
  std::string out(v.substr(0, k_max_field));
  for (auto& c : out) {
    if (c == '\t' || c == '\n' || c == '\r') c = ' ';
  }
  return out;
}

std::string decode_field(std::string_view v) { return v == "-" ? std::string() : std::string(v); }

std::vector<std::string_view> split_tabs(std::string_view line) {
  std::vector<std::string_view> out;
  while (true) {
    const auto tab = line.find('\t');
    out.push_back(line.substr(0, tab));
    if (tab == std::string_view::npos) return out;
    line.remove_prefix(tab + 1);
  }
}

std::string rank_line(const RankProgress& r, bool with_at) {
  const auto still_ms = static_cast<long long>(std::llround(std::clamp(r.still_seconds, 0.0, 1e9) * 1000));
  return fmt::format("rank={}\t{}\t{}\t{}\t{}\t{}\n", r.rank, r.alive ? 1 : 0,
                     r.exit_code ? std::to_string(*r.exit_code) : "-", still_ms, encode_field(r.in),
                     with_at ? encode_field(r.at) : "-");
}

std::string group_line(int rank, const GroupProgress& g) {
  return fmt::format("group={}\t{}\t{}\t{}\t{}\t{}\t{}\n", rank, encode_field(g.name), g.enqueued, g.started,
                     g.completed, encode_field(g.op), encode_field(g.desc));
}

}  // namespace

std::string progress_key(int attempt, int node_rank) { return fmt::format("progress/{}/{}", attempt, node_rank); }

std::string encode(const NodeProgress& p) {
  const auto head = fmt::format("rankrun-progress/1\nnode={}\nattempt={}\nseq={}\n", p.node_rank, p.attempt, p.seq);
  // The pending groups first: they say where a rank waits.
  const auto groups_of = [](const RankProgress& r) {
    std::vector<const GroupProgress*> gs;
    for (const auto& g : r.groups) gs.push_back(&g);
    std::stable_sort(gs.begin(), gs.end(), [](const auto* a, const auto* b) { return a->pending() && !b->pending(); });
    if (gs.size() > k_max_groups_per_rank) gs.resize(k_max_groups_per_rank);
    return gs;
  };
  for (const bool with_groups : {true, false}) {
    for (const bool with_at : {true, false}) {
      std::string out = head;
      for (const auto& r : p.ranks) out += rank_line(r, with_at);
      if (with_groups) {
        for (const auto& r : p.ranks) {
          for (const auto* g : groups_of(r)) out += group_line(r.rank, *g);
        }
      }
      if (out.size() <= k_max_progress_record) return out;
    }
  }
  return head;  // a node of thousands of ranks: its ranks are unknown to the decider
}

std::optional<NodeProgress> decode_progress(std::string_view text) {
  if (text.size() > k_max_progress_record) return std::nullopt;
  NodeProgress p;
  bool header = false, node = false, attempt = false;
  while (!text.empty()) {
    const auto nl = text.find('\n');
    if (nl == std::string_view::npos) return std::nullopt;
    const auto line = text.substr(0, nl);
    text.remove_prefix(nl + 1);
    if (!header) {
      if (line != "rankrun-progress/1") return std::nullopt;
      header = true;
      continue;
    }
    const auto eq = line.find('=');
    if (eq == std::string_view::npos) return std::nullopt;
    const auto key = line.substr(0, eq);
    const auto value = line.substr(eq + 1);
    if (key == "node") {
      node = parse_number(value, p.node_rank) && p.node_rank >= 0;
      if (!node) return std::nullopt;
    } else if (key == "attempt") {
      attempt = parse_number(value, p.attempt);
      if (!attempt) return std::nullopt;
    } else if (key == "seq") {
      if (!parse_number(value, p.seq)) return std::nullopt;
    } else if (key == "rank") {
      const auto f = split_tabs(value);
      RankProgress r;
      long long still_ms = 0;
      if (f.size() != 6 || !parse_number(f[0], r.rank) || r.rank < 0 || (f[1] != "0" && f[1] != "1") ||
          !parse_number(f[3], still_ms) || still_ms < 0) {
        return std::nullopt;
      }
      r.alive = f[1] == "1";
      if (f[2] != "-") {
        int code = 0;
        if (!parse_number(f[2], code)) return std::nullopt;
        r.exit_code = code;
      }
      r.still_seconds = static_cast<double>(still_ms) / 1000;
      r.in = decode_field(f[4]);
      r.at = decode_field(f[5]);
      p.ranks.push_back(std::move(r));
    } else if (key == "group") {
      const auto f = split_tabs(value);
      int rank = 0;
      GroupProgress g;
      if (f.size() != 7 || !parse_number(f[0], rank) || f[1] == "-" || !parse_number(f[2], g.enqueued) ||
          !parse_number(f[3], g.started) || !parse_number(f[4], g.completed)) {
        return std::nullopt;
      }
      g.name = std::string(f[1]);
      g.op = decode_field(f[5]);
      g.desc = decode_field(f[6]);
      const auto owner =
          std::find_if(p.ranks.begin(), p.ranks.end(), [rank](const RankProgress& r) { return r.rank == rank; });
      if (owner == p.ranks.end() || owner->groups.size() >= k_max_groups_per_rank) return std::nullopt;
      owner->groups.push_back(std::move(g));
    }
    // Unknown keys are skipped: a newer rankrun may add some.
  }
  if (!header || !node || !attempt) return std::nullopt;
  return p;
}

}  // namespace rankrun::launcher::cluster
