#pragma once
// Hang detection as a pure function of what rankrun has observed: when to look again, and
// whether the job is hung. No clocks or timers here: `now` comes in.
//
//   straggler      a rank exited 0 and others still run --exit-timeout later
//   heartbeat      a rank that heartbeated (worker runtime) has been silent --heartbeat-timeout
//   no progress    no output, no step and no collective change from any rank for --progress-timeout
//                  (heartbeats alone are not progress)
//   late arrival   some ranks reached the store rendezvous and others not --init-timeout later

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "launcher/base/hang_timeouts.hpp"

namespace rankrun::launcher {

using HangClock = std::chrono::steady_clock;
using HangTime = HangClock::time_point;

/// What rankrun knows about one rank of the current attempt.
struct RankActivity {
  bool alive = true;
  std::optional<int> exit_code;            // set when it exited (not killed)
  std::optional<HangTime> exited_at;
  HangTime started{};
  std::optional<HangTime> last_output;     // last line on stdout or stderr
  std::optional<HangTime> last_heartbeat;  // last rankrun/hb/<rank> write
  std::optional<HangTime> last_progress;   // step or collective record changed
  std::optional<HangTime> rendezvoused_at; // reached the store rendezvous
};

enum class HangKind { Straggler, HeartbeatLost, NoProgress, LateArrival };

struct HangFinding {
  HangKind kind;
  std::vector<int> stuck;      // local ranks that are stuck
  Seconds waited{0};           // how long the condition has held
  std::string reason;          // one line: what was detected
};

/// The earliest time at which check() could find a hang, given no new activity; nullopt when
/// nothing can hang yet (then no timer is needed).
std::optional<HangTime> next_check(const std::vector<RankActivity>& ranks, const HangTimeouts& timeouts);

/// A hang, if one of the conditions holds at `now`.
/// `ranks` by local rank; the reason names global ranks: local rank + `first_rank`.
std::optional<HangFinding> check_hang(const std::vector<RankActivity>& ranks, const HangTimeouts& timeouts, HangTime now,
                                      int first_rank = 0);

}  // namespace rankrun::launcher
