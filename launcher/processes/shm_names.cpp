#include "launcher/processes/shm_names.hpp"

#include <charconv>

namespace rankrun::launcher {

std::optional<pid_t> shm_creator_pid(std::string_view name) {
  constexpr std::string_view prefix = "torch_";
  if (name.substr(0, prefix.size()) != prefix) return std::nullopt;
  const auto rest = name.substr(prefix.size());
  const auto underscore = rest.find('_');
  // The pid must be followed by more of the name: "torch_123" alone is not torch's pattern.
  if (underscore == std::string_view::npos || underscore == 0 || underscore + 1 >= rest.size()) return std::nullopt;
  const auto digits = rest.substr(0, underscore);
  if (digits.front() == '0') return std::nullopt;
  pid_t pid = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), pid);
  if (ec != std::errc() || end != digits.data() + digits.size() || pid <= 0) return std::nullopt;
  return pid;
}

}  // namespace rankrun::launcher
