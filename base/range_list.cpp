#include "base/range_list.hpp"

#include "base/parse_number.hpp"

namespace rankrun {

std::optional<IntRange> parse_int_range(std::string_view item, int max) {
  const auto number = [max](std::string_view s, int& v) { return parse_number(s, v) && v >= 0 && v <= max; };
  IntRange r;
  const auto dash = item.find('-');
  if (dash == std::string_view::npos) {
    if (!number(item, r.first)) return std::nullopt;
    r.last = r.first;
    return r;
  }
  if (!number(item.substr(0, dash), r.first) || !number(item.substr(dash + 1), r.last)) return std::nullopt;
  return r;
}

std::optional<std::vector<int>> parse_range_list(std::string_view text, int max) {
  std::vector<int> out;
  if (text.empty()) return out;
  std::size_t start = 0;
  for (;;) {
    const auto comma = text.find(',', start);
    const auto item = text.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    const auto r = parse_int_range(item, max);
    if (!r || r->last < r->first) return std::nullopt;
    for (int v = r->first; v <= r->last; ++v) out.push_back(v);
    if (comma == std::string_view::npos) return out;
    start = comma + 1;
  }
}

std::string format_range_list(const std::vector<int>& sorted_numbers) {
  const auto& s = sorted_numbers;
  std::string out;
  for (std::size_t i = 0; i < s.size();) {
    std::size_t j = i;
    while (j + 1 < s.size() && s[j + 1] == s[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(s[i]);
    if (j > i) out += "-" + std::to_string(s[j]);
    i = j + 1;
  }
  return out;
}

}  // namespace rankrun
