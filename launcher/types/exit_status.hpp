#pragma once
// How a worker ended, and rankrun's exit-code contract. Pure.
//
// rankrun's exit code:
//   0        every worker exited 0
//   N        the root-cause worker exited with N (1..125)
//   128+S    the root-cause worker was killed by signal S, or rankrun itself was stopped by S
//   2        usage or configuration error (bad flag or value, port taken, script not found)
//   119      elastic: this node came to a rendezvous that is closed (the job already finished or
//            failed, or ended while it waited as a spare); it started no worker
//   120      preempted: the --preempt-signal (Slurm) came, then the signal that stopped the job
//   121      multi-node: the rendezvous failed (nodes missing at the timeout, two nodes with one
//            node rank, the store host unreachable until the timeout)
//   122      multi-node: a node was lost (its lease lapsed: killed, host down, cable cut); an
//            elastic job restarts without it instead, while it can
//   123      multi-node: this node lost the store host (node 0) and stopped its workers
//   118      rankrun itself could not go on while the job ran (a log directory or file it could
//            not create, an error of its own); it stopped the workers with their grace
//   124      a hang was detected; rankrun dumped the stacks and stopped the job
//   125      a process of the job could not be killed; the host needs attention
//
// In a multi-node job every node exits with the same code: the job's root cause's, wherever it
// happened (123 is this node's own view, when it can no longer hear from the job).

#include <optional>
#include <string>
#include <string_view>

namespace rankrun::launcher {

inline constexpr int k_exit_usage = 2;
inline constexpr int k_exit_internal = 118;
inline constexpr int k_exit_rendezvous_closed = 119;
inline constexpr int k_exit_preempted = 120;
inline constexpr int k_exit_rendezvous = 121;
inline constexpr int k_exit_node_lost = 122;
inline constexpr int k_exit_store_host_lost = 123;
inline constexpr int k_exit_hung = 124;
inline constexpr int k_exit_unkillable = 125;

struct ExitStatus {
  bool signaled = false;
  int value = 0;  // exit code, or signal number when `signaled`

  static ExitStatus exited(int code) { return {false, code}; }
  static ExitStatus killed(int signo) { return {true, signo}; }
  /// From a waitpid() status word.
  static ExitStatus from_wait_status(int status);

  bool success() const { return !signaled && value == 0; }
  /// The shell's convention: the code, or 128 + signal.
  int shell_code() const { return signaled ? 128 + value : value; }
  /// "exit 3", "SIGKILL".
  std::string describe() const;

  friend bool operator==(const ExitStatus&, const ExitStatus&) = default;
};

/// "SIGTERM" for 15; "signal 77" for numbers without a name.
std::string signal_name(int signo);
/// The number of a signal named as signal_name() names it ("SIGUSR1", "SIGRTMIN+2"); nullopt otherwise.
std::optional<int> signal_number(std::string_view name);

}  // namespace rankrun::launcher
