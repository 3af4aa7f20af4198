#pragma once
// Why an attempt ends, and how long a process may outlive SIGKILL. Shared by the policy, the
// report, the records nodes exchange and the options. Pure.

namespace rankrun::launcher {

/// How long a worker may outlive SIGKILL before it counts as unkillable (uninterruptible sleep
/// in a driver, a frozen cgroup): the job then ends with k_exit_unkillable rather than waiting.
inline constexpr double k_kill_timeout = 3.0;

/// Why the current attempt is ending. Remote: a failure, signal or hang on another node;
/// NodeLost: a node's lease lapsed; StoreHostLost: this node cannot reach the store host;
/// Membership: an elastic job's nodes changed, a new round follows; Internal: rankrun itself
/// could not go on (a directory or log file it could not create, an error of its own).
enum class StopReason { None, Failure, Signal, Hang, Remote, NodeLost, StoreHostLost, Membership, Internal };

}  // namespace rankrun::launcher
