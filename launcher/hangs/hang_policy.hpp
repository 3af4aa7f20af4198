#pragma once
// Hang detection as a pure function of what rankrun has observed: when to look again, whether
// the job is hung, and whether a straggler deserves a warning. No clocks or timers here: `now`
// comes in.
//
// A rank *moves* when it writes output, its worker-runtime step or collective record changes,
// its script calls rankrun.progress (a heartbeat of its calls),
// or its sampler (Python workers) sees its main thread's stack change or its CPU time grow. A
// rank is *in a collective* when its sampler finds the main thread inside a torch.distributed
// call or DDP's communication, or the runtime's record says it is inside one.
//
//   collectives    every running rank is in a collective and none moved for --progress-timeout
//   outsider       ranks in collectives have not moved for --straggler-timeout, waiting for a
//                  rank outside any collective (it may be working: a warning names it first)
//   straggler      a rank exited 0 and others still run --exit-timeout later
//   heartbeat      a rank that heartbeated (worker runtime) has been silent --heartbeat-timeout
//   late arrival   some ranks reached the store rendezvous and others not --init-timeout later
//   section        a rank stayed inside a section it declared (rankrun.progress.section, a
//                  checkpoint) past the section's own timeout
//
// A rank inside a section it declared is working until the section's timeout: no condition
// above counts its stillness, silence or absence from the collectives before then.
//
// A rank that moves never makes a hang; a running rank rankrun knows nothing about (no sampler,
// no runtime record) is never "in a collective", so a job of such ranks is never stopped by
// the first two.

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "launcher/types/hang_timeouts.hpp"

namespace rankrun::launcher {

using HangClock = std::chrono::steady_clock;
using HangTime = HangClock::time_point;

/// A section a rank declared (a checkpoint, an evaluation): working, not hung, for `timeout`.
struct RankSection {
  std::string name;
  HangTime since{};
  Seconds timeout{0};
  HangTime deadline() const { return since + std::chrono::duration_cast<HangClock::duration>(timeout); }
};

/// What rankrun knows about one rank of the current attempt.
struct RankActivity {
  bool alive = true;
  std::optional<int> exit_code;  // set when it exited (not killed)
  std::optional<HangTime> exited_at;
  HangTime started{};
  std::optional<HangTime> last_output;      // last line on stdout or stderr
  std::optional<HangTime> last_heartbeat;   // last rankrun/hb/<rank> write
  std::optional<HangTime> last_progress;    // step or collective record changed
  std::optional<HangTime> last_moved;       // its stack changed or it used CPU (sampler, /proc)
  std::optional<HangTime> rendezvoused_at;  // reached the store rendezvous
  std::string in;                           // the collective it is in; "" none or unknown
  std::string at;                           // where its main thread is ("train.py:12 in f"); "" unknown
  std::optional<RankSection> section;       // the section it is inside, if it declared one
  std::optional<HangTime> section_ended;    // when it last left one: the waits it caused start over
};

enum class HangKind { Collectives, Outsider, Straggler, HeartbeatLost, LateArrival, SectionOverrun };

/// "section 'checkpoint' for 412s of 900s".
std::string section_text(const RankSection& section, HangTime now);

struct HangFinding {
  HangKind kind;
  std::vector<int> stuck;  // local ranks that are stuck
  Seconds waited{0};       // how long the condition has held
  std::string reason;      // one line: what was detected
};

/// When the rank last moved (output, progress, its stack or CPU; its start at the latest).
HangTime last_movement(const RankActivity& r);

/// The earliest time at which check() could find a hang, given no new activity; nullopt when
/// nothing can hang yet (then no timer is needed).
std::optional<HangTime> next_check(const std::vector<RankActivity>& ranks, const HangTimeouts& timeouts);

/// A hang, if one of the conditions holds at `now`.
/// `ranks` by local rank; the reason names global ranks: local rank + `first_rank`.
std::optional<HangFinding> check_hang(const std::vector<RankActivity>& ranks, const HangTimeouts& timeouts,
                                      HangTime now, int first_rank = 0);

/// How often a straggler is named while it keeps the others waiting: a third of
/// --progress-timeout, between 1 and 60 seconds.
Seconds straggler_warning_interval(const HangTimeouts& timeouts);

/// A warning line (without "rankrun: warning: ") when ranks in collectives have waited, without
/// moving, for a warning interval or more for ranks outside any collective; nullopt otherwise.
/// "straggler: rank 0 is outside the collectives at train.py:40 in save (working) while ranks
/// 1-3 wait in barrier for 62s; a hang after --straggler-timeout=1800s"
std::optional<std::string> straggler_warning(const std::vector<RankActivity>& ranks, const HangTimeouts& timeouts,
                                             HangTime now, int first_rank = 0);

/// Why ranks in init_process_group may never reach rankrun's store, and what to do.
inline constexpr const char* k_foreign_rendezvous =
    "the script sets MASTER_ADDR/MASTER_PORT itself or passes init_method='tcp://...', so its rendezvous is not "
    "rankrun's and rankrun cannot see who is missing there; leave both to rankrun (init_method='env://', the default)";

/// A warning (without "rankrun: warning: ") when running ranks have been in init_process_group,
/// without moving, for `after` or more while none of them connected to rankrun's store
/// (`connected` by local rank); nullopt otherwise.
std::optional<std::string> foreign_rendezvous_warning(const std::vector<RankActivity>& ranks,
                                                      const std::vector<bool>& connected, Seconds after, HangTime now,
                                                      int first_rank = 0);

}  // namespace rankrun::launcher
