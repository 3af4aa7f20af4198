#include "base/text.hpp"

#include <cstdio>

namespace rankrun {

std::string printable(std::string_view text, std::size_t limit, char replacement) {
  std::string out;
  const auto shown = text.substr(0, limit);
  out.reserve(shown.size() + 3);
  for (const char c : shown) out.push_back(c >= 0x20 && c < 0x7F ? c : replacement);
  if (text.size() > limit) out += "...";
  return out;
}

std::vector<std::string> split_at(std::string_view text, char separator) {
  std::vector<std::string> out;
  std::size_t start = 0;
  for (;;) {
    const auto at = text.find(separator, start);
    out.emplace_back(text.substr(start, at == std::string_view::npos ? std::string_view::npos : at - start));
    if (at == std::string_view::npos) return out;
    start = at + 1;
  }
}

std::string format_bytes(std::uint64_t bytes) {
  constexpr std::uint64_t k_mib = 1ULL << 20;
  constexpr std::uint64_t k_gib = 1ULL << 30;
  char text[32];
  if (bytes >= k_gib) {
    std::snprintf(text, sizeof text, "%.1f GiB", static_cast<double>(bytes) / static_cast<double>(k_gib));
  } else {
    std::snprintf(text, sizeof text, "%llu MiB", static_cast<unsigned long long>(bytes / k_mib));
  }
  return text;
}

}  // namespace rankrun
