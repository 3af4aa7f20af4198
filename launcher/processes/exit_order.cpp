#include "launcher/processes/exit_order.hpp"

#include "base/parse_number.hpp"

#include <algorithm>

namespace rankrun::launcher {

std::optional<std::int64_t> parse_failure_time(std::string_view text) {
  if (!text.empty() && text.back() == '\n') text.remove_suffix(1);
  const auto ns = parse_number<std::int64_t>(text);
  if (!ns || *ns <= 0) return std::nullopt;
  return ns;
}

std::optional<double> own_failure_seconds(std::optional<std::int64_t> failed_unix_ns,
                                          std::chrono::system_clock::time_point started,
                                          std::chrono::system_clock::time_point ended_by) {
  if (!failed_unix_ns) return std::nullopt;
  const std::chrono::system_clock::time_point failed{
      std::chrono::duration_cast<std::chrono::system_clock::duration>(std::chrono::nanoseconds(*failed_unix_ns))};
  const auto slack = std::chrono::seconds(1);
  if (failed < started - slack || failed > ended_by + slack) return std::nullopt;
  return std::max(0.0, std::chrono::duration<double>(failed - started).count());
}

void order_by_records(std::vector<OrderedExit>& round,
                      const std::function<std::optional<std::int64_t>(pid_t)>& recorded) {
  if (round.size() < 2 || !recorded) return;
  std::vector<std::size_t> places;
  std::vector<std::pair<std::int64_t, OrderedExit>> timed;
  for (std::size_t i = 0; i < round.size(); ++i) {
    if (round[i].status.success()) continue;
    if (const auto at = recorded(round[i].pid)) {
      places.push_back(i);
      timed.emplace_back(*at, round[i]);
    }
  }
  std::stable_sort(timed.begin(), timed.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (std::size_t k = 0; k < places.size(); ++k) round[places[k]] = timed[k].second;
}

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
  const auto order_exit = [&](std::size_t i) {
    const int slot = slot_of(reaped[i].pid);
    taken[i] = true;
    if (slot >= 0)
      out.push_back({slot, reaped[i].pid, ExitStatus::from_wait_status(reaped[i].wait_status), {now, true}});
  };
  for (const pid_t pid : ready) {
    for (std::size_t i = 0; i < reaped.size(); ++i) {
      if (!taken[i] && reaped[i].pid == pid) {
        order_exit(i);
        break;
      }
    }
  }
  for (std::size_t i = 0; i < reaped.size(); ++i) {
    if (!taken[i]) order_exit(i);
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
