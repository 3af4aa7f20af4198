#pragma once
// Small text helpers shared by every room.

#include <string_view>

namespace rankrun {

/// `text` without the spaces and tabs at its ends.
constexpr std::string_view trim_blanks(std::string_view text) {
  const auto first = text.find_first_not_of(" \t");
  if (first == std::string_view::npos) return {};
  return text.substr(first, text.find_last_not_of(" \t") - first + 1);
}

}  // namespace rankrun
