#pragma once
// The summary printed when a run ends: one line per rank, the root cause first with its error
// and the last lines of its stderr, and a hint for failures rankrun recognises. Pure.

#include <optional>
#include <string>
#include <vector>

#include "launcher/cluster/records.hpp"
#include "launcher/types/error_record.hpp"
#include "launcher/types/exit_status.hpp"
#include "launcher/types/stop.hpp"

namespace rankrun::launcher {

struct RankReport {
  int rank = 0;
  int local_rank = 0;
  int pid = 0;
  std::optional<ExitStatus> status;
  bool stopped_by_rankrun = false;
  double seconds = 0;
  /// false: rankrun saw the exit late (it was stopped, or several exits waited for it), and
  /// `seconds` is the latest the rank can have ended: shown as "by 3.49s".
  bool seconds_exact = true;
  std::vector<std::string> stderr_tail;  // last lines, oldest first
  std::optional<ErrorRecord> error;
  std::string error_file;
};

struct RunSummary {
  std::vector<RankReport> ranks;  // by local rank
  std::optional<int> root;        // local rank of the root cause
  StopReason reason = StopReason::None;
  std::optional<int> signal;
  int exit_code = 0;
  int restart_count = 0;
  bool pinned = false;
  std::string entrypoint;
  /// Python workers: their interpreter, where it came from and its torch (LaunchConfig::python_line).
  std::string python;
  double seconds = 0;
  /// How far the ranks got in the store rendezvous (describe_arrivals()), shown when the job
  /// did not succeed; empty when no rank used the store.
  std::string arrivals;
  // Multi-node: this node ("node 1 (10.0.0.2)"), the attempt's job-wide notice (the root cause
  // when it happened elsewhere), and whether this node lost the store host.
  std::string node_label;
  std::optional<cluster::StopNotice> job_notice;
  bool store_host_lost = false;
  /// This node's own failure had gone out as the root cause before the store host was lost.
  bool root_sent = false;
  bool preempted = false;  // the stop signal followed the --preempt-signal
  /// The root-cause rank's GPU, when NVML finds it unfit now: "GPU 1 (NVIDIA H200): NVML cannot
  /// use it: GPU is lost; <what to do>".
  std::vector<std::string> gpu_notes;
  /// What rankrun itself could not do (StopReason::Internal), for the root cause.
  std::string own_failure;
};

/// "rank 2 (local 2, pid 41233)"-style table and root-cause block, ending with a newline.
std::string format_summary(const RunSummary& summary);

/// The hint for a failure rankrun recognises in `stderr_tail`, or empty.
std::string hint_for(const RankReport& rank, bool pinned);

}  // namespace rankrun::launcher
