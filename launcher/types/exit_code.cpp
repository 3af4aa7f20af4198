#include "launcher/types/exit_code.hpp"

namespace rankrun::launcher {

int exit_code(const JobEnding& e) {
  if (e.early) {
    switch (*e.early) {
      case EarlyEnd::Usage: return k_exit_usage;
      case EarlyEnd::RendezvousFailed: return k_exit_rendezvous;
      case EarlyEnd::RendezvousClosed: return k_exit_rendezvous_closed;
      case EarlyEnd::StoreHostLost: return k_exit_store_host_lost;
    }
  }
  if (e.unkillable) return k_exit_unkillable;
  if (e.preempted && e.reason == StopReason::Signal) return k_exit_preempted;
  if (e.membership && e.signal) return 128 + *e.signal;
  if (e.job_code) return *e.job_code;
  switch (e.reason) {
    case StopReason::None: return 0;
    case StopReason::Failure: return e.root ? e.root->shell_code() : 1;
    case StopReason::Signal: return 128 + e.signal.value_or(15);
    case StopReason::Hang: return k_exit_hung;
    case StopReason::NodeLost:
    case StopReason::Membership: return k_exit_node_lost;
    case StopReason::StoreHostLost: return k_exit_store_host_lost;
    case StopReason::Internal: return k_exit_internal;
    case StopReason::Remote: return 1;  // another node's stop always brings its code (job_code)
  }
  return 1;
}

}  // namespace rankrun::launcher
