#include "launcher/base/exit_code.hpp"

namespace rankrun::launcher {

int exit_code(const JobEnding& e) {
  if (e.unkillable) return kExitUnkillable;
  if (e.preempted && e.reason == StopReason::Signal) return kExitPreempted;
  if (e.membership && e.signal) return 128 + *e.signal;
  if (e.job_code) return *e.job_code;
  switch (e.reason) {
    case StopReason::None: return 0;
    case StopReason::Failure: return e.root ? e.root->shell_code() : 1;
    case StopReason::Signal: return 128 + e.signal.value_or(15);
    case StopReason::Hang: return kExitHung;
    case StopReason::NodeLost:
    case StopReason::Membership: return kExitNodeLost;
    case StopReason::StoreHostLost: return kExitStoreHostLost;
    case StopReason::Remote: return 1;  // another node's stop always brings its code (job_code)
  }
  return 1;
}

}  // namespace rankrun::launcher
