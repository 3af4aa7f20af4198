#include "launcher/hangs/rank_sample.hpp"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <string>

namespace rankrun::launcher {
namespace {

// "name value" lines; the value is the rest of the line.
bool field(std::string_view line, std::string_view name, std::string_view& value) {
  if (line.size() <= name.size() || line.substr(0, name.size()) != name || line[name.size()] != ' ') return false;
  value = line.substr(name.size() + 1);
  return true;
}

bool number(std::string_view text, double& out) {
  if (text.empty() || text.size() > 32) return false;
  const std::string copy(text);
  char* end = nullptr;
  out = std::strtod(copy.c_str(), &end);
  return end == copy.c_str() + copy.size();
}

bool unsigned_number(std::string_view text, std::uint64_t& out) {
  const auto* first = text.data();
  const auto* last = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(first, last, out);
  return ec == std::errc() && ptr == last && first != last;
}

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
    if (line == "rankrun-sample 1") header = true;
    else if (field(line, "seq", v)) seq = unsigned_number(v, s.seq);
    else if (field(line, "time", v)) time = number(v, s.time);
    else if (field(line, "changed", v)) changed = number(v, s.changed);
    else if (field(line, "main_cpu", v)) main_cpu = number(v, s.main_cpu);
    else if (field(line, "cpu", v)) cpu = number(v, s.cpu);
    else if (field(line, "in", v)) s.in = v == "-" ? std::string() : std::string(v);
    else if (field(line, "at", v)) s.at = v == "-" ? std::string() : std::string(v);
    else if (field(line, "end", v)) {
      std::uint64_t end = 0;
      if (!header || !seq || !time || !changed || !main_cpu || !cpu || !unsigned_number(v, end) || end != s.seq) return std::nullopt;
      return s;
    }
  }
  return std::nullopt;
}

double last_moved(const std::optional<RankSample>& before, const RankSample& now) {
  double moved = now.changed;
  if (before && before->seq != now.seq && now.time > before->time) {
    const double span = now.time - before->time;
    const bool main_busy = now.main_cpu >= 0 && before->main_cpu >= 0 && now.main_cpu - before->main_cpu >= k_main_cpu_share * span;
    const bool process_busy = now.cpu - before->cpu >= k_process_cpu_share * span;
    if (main_busy || process_busy) moved = std::max(moved, now.time);
  }
  return moved;
}

}  // namespace rankrun::launcher
