#include "launcher/cluster/rank_sample.hpp"

#include "base/parse_number.hpp"

#include <algorithm>
#include <cstdlib>
#include <string>

namespace rankrun::launcher {
namespace {

// "name value" lines; the value is the rest of the line.
bool named_value(std::string_view line, std::string_view name, std::string_view& value) {
  if (line.size() <= name.size() || line.substr(0, name.size()) != name || line[name.size()] != ' ') return false;
  value = line.substr(name.size() + 1);
  return true;
}

bool number(std::string_view text, double& out) {
  const auto v = parse_decimal(text);
  if (v) out = *v;
  return v.has_value();
}

// "NAME ENQUEUED STARTED COMPLETED OP DESC"
std::optional<GroupProgress> parse_group(std::string_view v) {
  std::vector<std::string_view> words;
  while (!v.empty() && words.size() < 7) {
    const auto sp = v.find(' ');
    words.push_back(v.substr(0, sp));
    v = sp == std::string_view::npos ? std::string_view() : v.substr(sp + 1);
  }
  if (words.size() != 6 || words[0].empty()) return std::nullopt;
  GroupProgress g;
  g.name = std::string(words[0]);
  if (!parse_number(words[1], g.enqueued) || !parse_number(words[2], g.started) ||
      !parse_number(words[3], g.completed)) {
    return std::nullopt;
  }
  if (words[4] != "-") g.op = std::string(words[4]);
  if (words[5] != "-") g.desc = std::string(words[5]);
  return g;
}

constexpr std::size_t k_max_groups = 64;

}  // namespace

std::optional<RankSample> parse_rank_sample(std::string_view text) {
  if (text.size() > 16384) return std::nullopt;
  RankSample s;
  bool header = false, seq = false, time = false, changed = false, main_cpu = false, cpu = false;
  std::size_t pos = 0;
  while (pos < text.size()) {
    const auto nl = text.find('\n', pos);
    if (nl == std::string_view::npos) return std::nullopt;  // cut short
    const auto line = text.substr(pos, nl - pos);
    pos = nl + 1;
    std::string_view v;
    if (line == "rankrun-sample 1")
      header = true;
    else if (named_value(line, "seq", v))
      seq = parse_number(v, s.seq);
    else if (named_value(line, "time", v))
      time = number(v, s.time);
    else if (named_value(line, "changed", v))
      changed = number(v, s.changed);
    else if (named_value(line, "main_cpu", v))
      main_cpu = number(v, s.main_cpu);
    else if (named_value(line, "cpu", v))
      cpu = number(v, s.cpu);
    else if (named_value(line, "in", v))
      s.in = v == "-" ? std::string() : std::string(v);
    else if (named_value(line, "at", v))
      s.at = v == "-" ? std::string() : std::string(v);
    else if (named_value(line, "pg", v)) {
      auto g = parse_group(v);
      if (!g || s.groups.size() >= k_max_groups) return std::nullopt;
      s.groups.push_back(std::move(*g));
    } else if (named_value(line, "end", v)) {
      std::uint64_t end = 0;
      if (!header || !seq || !time || !changed || !main_cpu || !cpu || !parse_number(v, end) || end != s.seq)
        return std::nullopt;
      return s;
    }
  }
  return std::nullopt;
}

namespace {

const GroupProgress* group_named(const std::vector<GroupProgress>& groups, const std::string& name) {
  for (const auto& g : groups) {
    if (g.name == name) return &g;
  }
  return nullptr;
}

// A group enqueued or completed a collective between the two samples (or appeared).
bool collectives_moved(const RankSample& before, const RankSample& now) {
  for (const auto& g : now.groups) {
    const auto* b = group_named(before.groups, g.name);
    if (!b || g.enqueued > b->enqueued || g.completed > b->completed) return true;
  }
  return false;
}

}  // namespace

bool waits_on_device(const std::optional<RankSample>& before, const RankSample& now) {
  bool on_device = false;
  for (const auto& g : now.groups) {
    if (g.pending() && g.op.rfind("nccl:", 0) == 0) on_device = true;
  }
  if (!on_device) return false;
  for (const auto& g : now.groups) {
    const auto* b = before ? group_named(before->groups, g.name) : nullptr;
    if (b && g.completed > b->completed) return false;
  }
  return true;
}

std::string op_name(const std::string& profiling_name) {
  const auto colon = profiling_name.find(':');
  return colon == std::string::npos ? profiling_name : profiling_name.substr(colon + 1);
}

std::string pending_collective(const RankSample& s) {
  for (const auto& g : s.groups) {
    if (!g.pending()) continue;
    const auto op = g.op.empty() ? std::string("a collective") : op_name(g.op);
    const bool default_group = g.desc == "default_pg" || (g.desc.empty() && g.name == "0");
    return op + " #" + std::to_string(g.first_pending()) + (default_group ? "" : " of group " + g.name);
  }
  return {};
}

std::string waits_in(const RankSample& s) { return s.in.empty() ? pending_collective(s) : s.in; }

std::string describe_collectives(const RankSample& s) {
  std::string out;
  const auto group = [](const GroupProgress& g) {
    const bool default_group = g.desc == "default_pg" || (g.desc.empty() && g.name == "0");
    return default_group ? std::string() : " of group " + g.name;
  };
  for (const auto& g : s.groups) {
    if (!g.pending()) continue;
    const auto seq = g.first_pending();
    const bool started = g.started >= seq;
    out += (out.empty() ? "" : ", ") + (g.op.empty() ? std::string("collective") : op_name(g.op)) + " #" +
           std::to_string(seq) + group(g) + (started ? " started, not completed" : " not completed");
  }
  if (!out.empty()) return out;
  for (const auto& g : s.groups) {
    if (g.completed > 0) out += (out.empty() ? "last completed #" : ", #") + std::to_string(g.completed) + group(g);
  }
  return out;
}

double last_moved(const std::optional<RankSample>& before, const RankSample& now) {
  double moved = now.changed;
  if (before && before->seq != now.seq && now.time > before->time) {
    if (collectives_moved(*before, now)) return std::max(moved, now.time);
    if (waits_on_device(before, now)) return moved;
    const double span = now.time - before->time;
    const bool main_busy =
        now.main_cpu >= 0 && before->main_cpu >= 0 && now.main_cpu - before->main_cpu >= k_main_cpu_share * span;
    const bool process_busy = now.cpu - before->cpu >= k_process_cpu_share * span;
    if (main_busy || process_busy) moved = std::max(moved, now.time);
  }
  return moved;
}

}  // namespace rankrun::launcher
