#pragma once
// The hang detector's timeouts, as the options give them. Pure.

#include <chrono>
#include <optional>

namespace rankrun::launcher {

using Seconds = std::chrono::duration<double>;

struct HangTimeouts {
  std::optional<Seconds> exit_timeout;       // a rank exited 0, the others still run
  std::optional<Seconds> heartbeat_timeout;  // lost heartbeats
  std::optional<Seconds> progress_timeout;   // every running rank blocked in collectives
  std::optional<Seconds> straggler_timeout;  // ranks blocked in collectives wait for one outside
  std::optional<Seconds> init_timeout;       // late arrival at the rendezvous
  bool any() const {
    return exit_timeout || heartbeat_timeout || progress_timeout || straggler_timeout || init_timeout;
  }
};

/// The defaults a user would choose: a hang in the collectives ends within minutes (before
/// torch's own NCCL watchdog, 10 minutes); a rank outside them keeps the others waiting for half
/// an hour before it is a hang (torch's own collective timeout is as long).
inline constexpr double k_default_progress_timeout = 180;
inline constexpr double k_default_straggler_timeout = 1800;

}  // namespace rankrun::launcher
