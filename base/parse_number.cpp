#include "base/parse_number.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <string>

namespace rankrun {

std::optional<double> parse_decimal(std::string_view text) {
  // Bounded: no decimal a person or a program writes needs more.
  if (text.empty() || text.size() > 64) return std::nullopt;
  bool digit = false;
  for (const char c : text) {
    if (c >= '0' && c <= '9') {
      digit = true;
    } else if (c != '+' && c != '-' && c != '.' && c != 'e' && c != 'E') {
      return std::nullopt;
    }
  }
  if (!digit) return std::nullopt;
  // strtod, not from_chars: libc++ 16 (the release build's) has no floating from_chars.
  const std::string copy(text);
  char* end = nullptr;
  errno = 0;
  const double value = std::strtod(copy.c_str(), &end);
  if (end != copy.c_str() + copy.size() || errno == ERANGE || !std::isfinite(value)) return std::nullopt;
  return value;
}

std::optional<std::uint64_t> parse_byte_size(std::string_view text) {
  const auto digits = std::min(text.find_first_not_of("0123456789"), text.size());
  const auto number = parse_number<std::uint64_t>(text.substr(0, digits));
  if (!number) return std::nullopt;
  std::string unit(text.substr(digits));
  for (auto& c : unit) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  if (!unit.empty() && unit.back() == 'b') unit.pop_back();  // "KB", "KiB", "B"
  if (unit.size() == 2 && unit[1] == 'i') unit.pop_back();   // "Ki"
  constexpr std::string_view k_prefixes = "kmgtpe";
  unsigned shift = 0;
  if (unit.size() == 1) {
    const auto at = k_prefixes.find(unit[0]);
    if (at == std::string_view::npos) return std::nullopt;
    shift = 10 * static_cast<unsigned>(at + 1);
  } else if (!unit.empty()) {
    return std::nullopt;
  }
  if (shift > 0 && *number > (UINT64_MAX >> shift)) return std::nullopt;
  return *number << shift;
}

}  // namespace rankrun
