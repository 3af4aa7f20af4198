// The project's one whole-string number parser, below every room (launcher, rendezvous, the
// worker runtime): integers here, decimals in parse_number.cpp. Pure.
#pragma once

#include <charconv>
#include <cstdint>
#include <optional>
#include <string_view>
#include <system_error>
#include <type_traits>

namespace rankrun {

// `text` as a T when all of it is one number in `base` (no sign for an unsigned T, no spaces,
// no "+", no "0x"), nullopt when it is empty, has anything else in it or does not fit in T.
template <class T>
std::optional<T> parse_number(std::string_view text, int base = 10) {
  static_assert(std::is_integral_v<T> && !std::is_same_v<T, bool>, "parse_number reads integers");
  T value{};
  const char* const first = text.data();
  const char* const last = first + text.size();
  const auto [end, ec] = std::from_chars(first, last, value, base);
  if (text.empty() || ec != std::errc{} || end != last) return std::nullopt;
  return value;
}

// The same, into `out` (left as it was when `text` is not one): for reading several fields in
// one condition.
template <class T>
bool parse_number(std::string_view text, T& out, int base = 10) {
  const auto value = parse_number<T>(text, base);
  if (value) out = *value;
  return value.has_value();
}

/// `text` as a finite decimal number when all of it is one: digits with an optional sign, point
/// and exponent ("30", "-1.5", "2e-3", ".5"); nullopt when it is empty, has blanks or anything
/// else in it (hex, "inf", "nan", a unit), or does not fit in a double. The C locale's point.
std::optional<double> parse_decimal(std::string_view text);

/// A size in bytes as people write it: decimal digits, then a unit of powers of 1024 in any case,
/// K, KB, Ki and KiB alike, up to E ("512M", "4GiB", "2048k"); B or none: bytes. nullopt for
/// anything else (a sign, a space, a fraction, "0x", another unit) or a size past 64 bits.
std::optional<std::uint64_t> parse_byte_size(std::string_view text);

}  // namespace rankrun
