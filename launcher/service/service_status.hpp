#pragma once
// What rankrun tells systemd when it runs as a Type=notify service (sd_notify.hpp sends it):
// the STATUS= line `systemctl status` shows, and the other messages of the notify protocol,
// formatted here without any I/O.

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>

namespace rankrun::launcher {

/// The job as the STATUS= line describes it.
struct ServiceSnapshot {
  enum class State { WaitingForNodes, Running, Stopping, Done };
  State state = State::Running;
  int restart_count = 0;  // the attempt: 0 for the first
  int max_restarts = 0;
  int node_rank = 0;
  int nnodes = 1;
  int ranks_running = 0;               // this node's live workers
  std::optional<long long> last_step;  // the highest step a runtime heartbeat reported
  std::string why;                     // Stopping: why ("rank 3 failed (exit 1)"); Done: how it ended
};

/// One human-readable line, e.g. "running: 8 ranks on this node (attempt 0, 1 restart),
/// node 1 of 3, last step 1200".
std::string format_service_status(const ServiceSnapshot& s);

/// "STATUS=<text>", newlines in the text replaced by spaces (one message per line).
std::string status_message(const std::string& text);
/// "READY=1\nSTATUS=<text>".
std::string ready_message(const std::string& status);
/// "STOPPING=1\nSTATUS=<text>".
std::string stopping_message(const std::string& status);
/// "EXTEND_TIMEOUT_USEC=<n>" for `seconds` (rounded up to a microsecond).
std::string extend_timeout_message(double seconds);
inline constexpr const char* k_watchdog_message = "WATCHDOG=1";

/// How often to send WATCHDOG=1: half of $WATCHDOG_USEC, when it is set, valid and meant for
/// this process ($WATCHDOG_PID unset or equal to `self`); nullopt otherwise.
std::optional<std::chrono::microseconds> watchdog_interval(const std::optional<std::string>& watchdog_usec,
                                                           const std::optional<std::string>& watchdog_pid, pid_t self);

}  // namespace rankrun::launcher
