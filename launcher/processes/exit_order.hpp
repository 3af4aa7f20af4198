#pragma once
// The order in which workers really ended, and what rankrun knows of when. Pure.
//
// rankrun reaps with waitpid(-1), which hands back the children that have exited in the kernel's
// child-list order (lowest pid first), not in the order they exited. When rankrun looks late (a
// loaded node's scheduler delayed it, or it was stopped), several workers have exited by then,
// and the first one reaped is not the first one that ended: a victim of a broken collective
// would be named as the root cause. Each worker's pidfd sits in an epoll set whose ready list
// keeps the order in which they became readable, which is the order of their exits, however
// late rankrun asks. order_exits() puts a round of reaped workers in that order.
//
// The time rankrun saw an exit is the worker's own time only when rankrun looked promptly: it was
// not just continued after a stop (SIGCONT), and the exit was the only one waiting or all that
// were waiting ended within k_precise of the look (none can have ended before rankrun's last
// look, its last signal or its last start of a worker). Any other time is an upper bound, shown
// as "by" in the report.

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string_view>
#include <vector>

#include "launcher/types/exit_status.hpp"

namespace rankrun::launcher {

/// When a worker ended, as rankrun knows it: `at` is when rankrun saw the exit; `exact` is false
/// when rankrun may have looked late, so that `at` is only the latest the worker can have ended.
struct ExitSeen {
  std::chrono::steady_clock::time_point at{};
  bool exact = true;
  /// It waited for rankrun together with an exit reported before it, and rankrun had not
  /// signalled it: it was over before the stop that the earlier exit began, not its doing.
  bool before_signal = false;
};

/// How long after rankrun is continued from a stop the exits it sees are taken as late: they may
/// have happened while it was stopped.
inline constexpr std::chrono::milliseconds k_after_continue{250};
/// Exits seen together whose window (from the earliest they can have ended to the look) is this
/// short have their own times, near enough.
inline constexpr std::chrono::milliseconds k_precise{50};

struct ReapedChild {
  pid_t pid;
  int wait_status;
};

struct OrderedExit {
  int slot;
  pid_t pid;
  ExitStatus status;
  ExitSeen seen;
};

/// A worker's own record of when it failed (stacks/<pid>.failed: Unix nanoseconds and a newline,
/// written by rankrun's Python hook and by the worker runtime); nullopt when `text` is not one.
std::optional<std::int64_t> parse_failure_time(std::string_view text);

/// The rank's own time, in seconds since it started, from its failure record: for a rank whose
/// exit rankrun saw late (by `ended_by`). nullopt when there is no record or it cannot be this
/// run's (before the rank started, or after rankrun saw it end: a second of slack either way,
/// for the clocks' reading).
std::optional<double> own_failure_seconds(std::optional<std::int64_t> failed_unix_ns,
                                          std::chrono::system_clock::time_point started,
                                          std::chrono::system_clock::time_point ended_by);

/// Within one round, failed exits that recorded their failure (`recorded(pid)`, Unix ns) take the
/// places of the round's recorded exits in the order of their records; the others keep theirs. A
/// Python rank can close its sockets while its interpreter shuts down (a DataLoader's workers
/// joined after the process group is gone), so its victims can end before it does: their records
/// still come after its own.
void order_by_records(std::vector<OrderedExit>& round,
                      const std::function<std::optional<std::int64_t>(pid_t)>& recorded);

/// One round of reaping. `ready` are the workers' pids whose pidfds became readable, in the
/// kernel's order; `workers[slot]` the pid of each running worker (-1: none); `reaped` what
/// waitpid(-1) returned, in its order. Returns the workers' exits: first those in `ready` order,
/// then any reaped worker the ready list did not name (no pidfd: ENOSYS, or EMFILE), in reap
/// order. Children that are not workers (adopted orphans) are not in the result.
/// `now` is when rankrun looked; `continued` when rankrun was last continued after a stop (the
/// epoch: never); `earliest` the earliest these exits can have happened (the last look that
/// found no exit, the last signal to the workers, the last start of one).
std::vector<OrderedExit> order_exits(const std::vector<pid_t>& ready, const std::vector<pid_t>& workers,
                                     const std::vector<ReapedChild>& reaped, std::chrono::steady_clock::time_point now,
                                     std::chrono::steady_clock::time_point continued,
                                     std::chrono::steady_clock::time_point earliest = {});

}  // namespace rankrun::launcher
