#pragma once
// Text helpers shared by every room. Pure.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace rankrun {

/// `text` without the spaces and tabs at its ends.
constexpr std::string_view trim_blanks(std::string_view text) {
  const auto first = text.find_first_not_of(" \t");
  if (first == std::string_view::npos) return {};
  return text.substr(first, text.find_last_not_of(" \t") - first + 1);
}

/// `text` without the blanks and line ends (spaces, tabs, CR, LF) at its ends.
constexpr std::string_view trim_space(std::string_view text) {
  const auto first = text.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return {};
  return text.substr(first, text.find_last_not_of(" \t\r\n") - first + 1);
}

/// The first `limit` bytes of `text` fit for a message or a log line: every byte outside
/// printable ASCII (0x20-0x7E) shown as `replacement`, "..." after them when there were more.
std::string printable(std::string_view text, std::size_t limit = 200, char replacement = '?');

/// `text` cut at each `separator`: "a,,b" is {"a", "", "b"}, "" is {""}.
std::vector<std::string> split_at(std::string_view text, char separator);

/// A size for people: "512 MiB" under a GiB, "7.8 GiB" from one up.
std::string format_bytes(std::uint64_t bytes);

}  // namespace rankrun
