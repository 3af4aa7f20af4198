#include "launcher/processes/exit_order.hpp"

#include <algorithm>

namespace rankrun::launcher {

std::vector<OrderedExit> order_exits(const std::vector<pid_t>& ready, const std::vector<pid_t>& workers,
                                     const std::vector<ReapedChild>& reaped, std::chrono::steady_clock::time_point now,
                                     std::chrono::steady_clock::time_point continued,
                                     std::chrono::steady_clock::time_point earliest) {
  std::vector<OrderedExit> out;
  std::vector<bool> taken(reaped.size(), false);
  const auto slot_of = [&workers](pid_t pid) {
    const auto it = std::find(workers.begin(), workers.end(), pid);
    return it == workers.end() ? -1 : static_cast<int>(it - workers.begin());
  };
  const auto take = [&](std::size_t i) {
    const int slot = slot_of(reaped[i].pid);
    taken[i] = true;
    if (slot >= 0)
      out.push_back({slot, reaped[i].pid, ExitStatus::from_wait_status(reaped[i].wait_status), {now, true}});
  };
  for (const pid_t pid : ready) {
    for (std::size_t i = 0; i < reaped.size(); ++i) {
      if (!taken[i] && reaped[i].pid == pid) {
        take(i);
        break;
      }
    }
  }
  for (std::size_t i = 0; i < reaped.size(); ++i) {
    if (!taken[i]) take(i);
  }
  // Prompt only when rankrun had not just been continued from a stop, and the exit was alone or
  // the window in which they all ended is short.
  const bool just_continued =
      continued != std::chrono::steady_clock::time_point{} && now >= continued && now - continued <= k_after_continue;
  const bool short_window = earliest != std::chrono::steady_clock::time_point{} && now - earliest <= k_precise;
  if (just_continued || (out.size() > 1 && !short_window)) {
    for (auto& e : out) e.seen.exact = false;
  }
  return out;
}

}  // namespace rankrun::launcher
