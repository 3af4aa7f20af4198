#pragma once
// Watches a running attempt for hangs (hang_policy.hpp decides), and when one is found,
// diagnoses it before anything is killed: asks every live rank for its stack (through a
// StackCollector), prints the dumps prefixed by rank, a line per rank and a verdict, then tells
// the job. While the attempt runs it reads the ranks' samplers and CPU time every few seconds
// (what the policy calls moving, and where each rank is) and names a straggler that keeps the
// others waiting.

#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "launcher/report/console.hpp"
#include "launcher/types/exit_status.hpp"
#include "base/unique_fd.hpp"
#include "launcher/cluster/progress.hpp"
#include "launcher/hangs/flight_match.hpp"
#include "launcher/hangs/hang_policy.hpp"
#include "launcher/hangs/hang_report.hpp"
#include "launcher/hangs/stack_collector.hpp"

namespace rankrun::launcher {

/// What the store knows about a rank, read when a hang is reported.
struct RankStoreView {
  std::optional<CollectiveState> collective;
  std::optional<double> heartbeat_age;
  std::optional<std::int64_t> step;
  std::string last_key;
  std::optional<Arrival> arrival;      // how far it got in this node's store (none: the store is elsewhere)
  std::optional<RankBatches> batches;  // rankrun.data's count this epoch
  std::optional<RankSection> section;  // the section it declared, while inside
  std::optional<double> steps_per_second;
};

class HangMonitor {
 public:
  struct Hooks {
    std::function<RankStoreView(int local_rank)> store_view;
    /// Called once the diagnosis is printed: the job stops as hung.
    std::function<void()> hung;
    /// A job of several nodes (set_job): this node's ranks' progress at each look, for the node
    /// that decides the collectives' hangs for the whole job.
    std::function<void(cluster::NodeProgress)> share;
    /// A straggler warning, as printed (the event log).
    std::function<void(const std::string&)> straggler = {};
  };

  HangMonitor(boost::asio::io_context& io, HangTimeouts timeouts, StackCollector& stacks, Console& console,
              Hooks hooks);

  /// A new attempt: `pids` by local rank, `ranks` global ranks by local rank; dumps are also
  /// saved to `<local_rank>/stacks.txt` (a new file, reached following no link) in the open
  /// `attempt_dir` (at `attempt_dir_path`) when it is open.
  void start_attempt(const std::vector<pid_t>& pids, const std::vector<int>& ranks, UniqueFd attempt_dir = {},
                     std::string attempt_dir_path = {});
  /// The job's nodes, from its round (before the round's first attempt). With more than one,
  /// the collectives' hangs (--progress-timeout, --straggler-timeout) are decided on every rank
  /// of the job by one node (`decides`: node rank 0), from every node's progress
  /// (take_progress), with the same defaults as on one node; the other conditions stay each
  /// node's own.
  void set_job(int nodes, int node_rank, int world_size, bool decides);
  /// The deciding node: the latest progress of every node (its own included or not).
  void take_progress(const std::vector<cluster::NodeProgress>& nodes);
  /// Another node found the job hung: this node's running ranks' stacks and flight recorder
  /// dumps are collected and kept (on the console and in the attempt directory, as for a hang
  /// found here), then the checks stop and `done` runs with the ranks' lines. false (`done` is
  /// not called) when there is nothing to collect.
  bool collect_evidence(std::function<void(const std::string& lines)> done);
  /// The collective timeout rank `local_rank` died of ("Timed out waiting 3000ms for recv
  /// operation to complete"), when its sampler said so.
  std::optional<std::string> collective_timeout(int local_rank) const;
  /// Rank `local_rank` died of a collective timeout: the running ranks' stacks and flight
  /// recorder dumps are collected and kept (as for a hang), its own dump with them, and `done`
  /// runs with the flight recorder's verdict ("" none). false (`done` is not called) when no
  /// rank runs to ask.
  bool collect_timeout_evidence(int local_rank, std::function<void(const std::string& verdict)> done);
  /// The last hang found here: its HANG line and verdict, for the other nodes; "" none.
  const std::string& last_report() const { return m_last_report; }
  void on_output(int local_rank);
  void on_exit(int local_rank, const ExitStatus& status);
  void on_heartbeat(int local_rank);
  /// The section a heartbeat said the rank is in (nullopt: none); true when that changed.
  bool on_section(int local_rank, std::optional<RankSection> section);
  void on_progress(int local_rank);
  void on_rendezvous(int local_rank);
  /// No more checks (the attempt is ending).
  void stop();
  /// Where a rank was when the checks stopped, as its sampler or the runtime said: "in
  /// all_reduce at train.py:12 in step, not moving for 200s"; "" when nothing is known.
  std::string last_seen(int local_rank) const;
  /// Every running rank's line as the hang report writes it (no stacks): what a node prints
  /// when another node's hang stops the job.
  std::string rank_lines() const;
  /// This node's ranks now, as its progress record carries them (`rankrun status`).
  cluster::NodeProgress ranks_now() const;
  /// The deciding node: every other node's latest progress, and seconds since it came.
  std::vector<std::pair<cluster::NodeProgress, double>> others() const;

 private:
  void arm();
  void on_timer();
  /// Every look_interval: samples the ranks, warns of a rendezvous the ranks do not reach and
  /// of a straggler, and judges whether the job hangs.
  void look();
  /// Each running rank's sampler (or the runtime's record) and CPU time; returns when it read.
  HangTime sample_ranks();
  /// Once: ranks that never reached this node's store while others did.
  void warn_of_a_foreign_rendezvous(HangTime now);
  /// Several nodes: this node's word to the deciding node, and (there) the job's verdict; one
  /// node: the straggler warning. True when a hang was found (its diagnosis has begun).
  bool judge(HangTime now);
  void schedule_look();
  void diagnose(const HangFinding& finding, bool job_wide = false);
  void report(const HangFinding& finding, const std::vector<std::string>& dumps, bool job_wide);
  /// This node's ranks' lines, stacks (on the console and in the attempt directory) and flight
  /// recorder dumps, for the report.
  std::vector<RankHangState> local_states(const std::vector<std::string>& dumps, std::vector<RankFlight>& flights,
                                          bool& any_flight);
  /// The samplers' latest reading of each rank, taken again after the stacks were written.
  void read_samples_again();
  /// What the monitor knows of local rank `i`: its samples, its stillness, its store view.
  RankHangState watched_state(std::size_t i) const;
  /// Local rank `i`'s stack `dump` (empty: none came), on the console, in the attempt directory,
  /// and the wait point it shows into `s`.
  void keep_stack(std::size_t i, RankHangState& s, const std::string& dump);
  /// The other nodes' ranks, as their progress says, for the job-wide report.
  void remote_states(std::vector<RankHangState>& states, std::vector<RankFlight>& flights) const;
  /// The checks this node makes on its own ranks: without the collectives' when another node
  /// decides them.
  HangTimeouts local_timeouts() const;
  /// This node's progress now.
  cluster::NodeProgress progress(HangTime now);
  cluster::NodeProgress ranks_at(HangTime now) const;
  /// Every rank of the job as the deciding node knows it (by global rank); nullopt while some
  /// node's progress is missing or stale.
  std::optional<std::vector<RankActivity>> job_ranks(HangTime now) const;
  /// The deciding node's look at the whole job; true when a hang is being diagnosed.
  bool look_at_the_job(HangTime now);
  /// Keeps a rank's flight recorder dumps in the attempt directory and reads them as one.
  std::optional<FlightDump> keep_flight_dumps(int local_rank, int rank, const std::vector<std::string>& texts);
  RankActivity* rank(int local_rank);
  /// Each rank's pid while it runs, -1 once it exited (what the StackCollector takes).
  std::vector<pid_t> live_pids() const;

  HangTimeouts m_timeouts;
  StackCollector& m_stacks;
  Console& m_console;
  Hooks m_hooks;
  boost::asio::steady_timer m_timer;
  boost::asio::steady_timer m_look_timer;
  std::optional<HangTime> m_armed_for;
  std::vector<std::optional<RankSample>> m_samples;               // by local rank: the last sample read
  std::vector<std::optional<std::pair<HangTime, double>>> m_cpu;  // by local rank: (when, CPU seconds)
  std::optional<HangTime> m_next_warning;
  bool m_warned_rendezvous = false;
  std::optional<HangTime> m_stopped_at;  // when the checks of the attempt stopped
  std::vector<RankActivity> m_ranks;
  std::vector<pid_t> m_pids;
  std::vector<int> m_global;
  std::vector<std::optional<ExitStatus>> m_status;
  UniqueFd m_attempt_dir;
  std::string m_attempt_dir_path;
  bool m_stopped = true;
  bool m_diagnosing = false;
  // The job's nodes (set_job) and, on the deciding node, every node's latest progress.
  struct Remote {
    cluster::NodeProgress progress;
    HangTime received{};
    HangTime changed{};  // when its seq last changed
  };
  int m_nodes = 1;
  int m_node_rank = 0;
  int m_world_size = 0;
  bool m_decides = false;
  std::uint64_t m_progress_seq = 0;
  HangTime m_attempt_started{};
  std::vector<std::optional<Remote>> m_remote;  // by node rank
  std::optional<HangTime> m_next_job_warning;
  std::string m_last_report;
};

}  // namespace rankrun::launcher
