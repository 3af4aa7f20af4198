#pragma once
// The one place rankrun's exit code is decided (the contract: exit_status.hpp). The policy
// calls it when a job ends, and a multi-node job's stop notice calls it for the code every
// node exits with. Pure.

#include <optional>

#include "launcher/types/exit_status.hpp"
#include "launcher/types/stop.hpp"

namespace rankrun::launcher {

/// How a launch ends without an attempt's ending to decide it: a usage error (nothing was
/// started), the rendezvous (or a restart's barrier) failed or was closed, the store host lost
/// between rounds.
enum class EarlyEnd { Usage, RendezvousFailed, RendezvousClosed, StoreHostLost };

/// How a job (or, for a stop notice, an attempt on every node) ended.
struct JobEnding {
  StopReason reason = StopReason::None;
  std::optional<ExitStatus> root;  // Failure: the root-cause worker's status
  std::optional<int> signal;       // the signal that stopped rankrun, if one did
  bool preempted = false;          // the --preempt-signal came before that signal
  bool unkillable = false;         // a process of the job outlived SIGKILL
  /// Multi-node: the exit code of the attempt's notice, the same on every node.
  std::optional<int> job_code;
  /// The notice was a membership change (an elastic round ends), which a signal cut short.
  bool membership = false;
  /// The launch ended before (or between) attempts, for this reason.
  std::optional<EarlyEnd> early;

  static JobEnding of(StopReason reason) {
    JobEnding e;
    e.reason = reason;
    return e;
  }
  static JobEnding failed(ExitStatus root) {
    JobEnding e = of(StopReason::Failure);
    e.root = root;
    return e;
  }
  static JobEnding ended_early(EarlyEnd why) {
    JobEnding e;
    e.early = why;
    return e;
  }
  static JobEnding stopped_by(int signo) {
    JobEnding e = of(StopReason::Signal);
    e.signal = signo;
    return e;
  }
};

int exit_code(const JobEnding& ending);

}  // namespace rankrun::launcher
