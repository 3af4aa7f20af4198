#pragma once
// The hang detector's timeouts, as the options give them. Pure.

#include <chrono>
#include <optional>

namespace rankrun::launcher {

using Seconds = std::chrono::duration<double>;

struct HangTimeouts {
  std::optional<Seconds> exit_timeout;       // stragglers
  std::optional<Seconds> heartbeat_timeout;  // lost heartbeats
  std::optional<Seconds> progress_timeout;   // no progress at all
  std::optional<Seconds> init_timeout;       // late arrival at the rendezvous
  bool any() const { return exit_timeout || heartbeat_timeout || progress_timeout || init_timeout; }
};

}  // namespace rankrun::launcher
