#include "launcher/service/service_status.hpp"

#include "base/parse_number.hpp"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>

namespace rankrun::launcher {

namespace {

std::string plural(long long n, const char* word) { return fmt::format("{} {}{}", n, word, n == 1 ? "" : "s"); }

std::string one_line(const std::string& text) {
  std::string out = text;
  for (auto& c : out) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return out;
}

}  // namespace

std::string format_service_status(const ServiceSnapshot& s) {
  std::string where;
  if (s.nnodes > 1) where = fmt::format(", node {} of {}", s.node_rank, s.nnodes);
  switch (s.state) {
    case ServiceSnapshot::State::WaitingForNodes:
      return fmt::format("waiting for nodes: rendezvous of {} (this is node {})", plural(s.nnodes, "node"),
                         s.node_rank);
    case ServiceSnapshot::State::Running: {
      std::string text =
          fmt::format("running: {} on this node (attempt {}, {} of {}){}", plural(s.ranks_running, "rank"),
                      s.restart_count, plural(s.restart_count, "restart"), s.max_restarts, where);
      if (s.last_step) text += fmt::format(", last step {}", *s.last_step);
      return text;
    }
    case ServiceSnapshot::State::Stopping: {
      std::string text = "stopping";
      if (!s.why.empty()) text += ": " + s.why;
      text += fmt::format(" (attempt {}{})", s.restart_count, where);
      return one_line(text);
    }
    case ServiceSnapshot::State::Done: return one_line(s.why.empty() ? std::string("done") : "done: " + s.why);
  }
  return {};
}

std::string status_message(const std::string& text) { return "STATUS=" + one_line(text); }

std::string ready_message(const std::string& status) { return "READY=1\n" + status_message(status); }

std::string stopping_message(const std::string& status) { return "STOPPING=1\n" + status_message(status); }

std::string extend_timeout_message(double seconds) {
  const auto usec = seconds <= 0 ? 0LL : static_cast<long long>(std::ceil(seconds * 1e6));
  return fmt::format("EXTEND_TIMEOUT_USEC={}", usec);
}

std::optional<std::chrono::microseconds> watchdog_interval(const std::optional<std::string>& watchdog_usec,
                                                           const std::optional<std::string>& watchdog_pid, pid_t self) {
  if (!watchdog_usec) return std::nullopt;
  const auto usec = parse_number<long long>(*watchdog_usec);
  if (!usec || *usec <= 0) return std::nullopt;
  if (watchdog_pid) {
    const auto pid = parse_number<long long>(*watchdog_pid);
    if (!pid || *pid != static_cast<long long>(self)) return std::nullopt;
  }
  return std::chrono::microseconds(std::max<long long>(*usec / 2, 1));
}

}  // namespace rankrun::launcher
