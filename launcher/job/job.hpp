#pragma once
// The one owner of a job's life on this node. It hosts the workers' store and watches its
// traffic, starts each attempt's workers through the Spawner, routes their output, watches for
// hangs, and turns everything that happens (exits, signals, timers, a hang, the cleanup's
// answer) into events for the pure JobPolicy, whose actions it carries out. It ends with the
// summary and rankrun's exit code. Everything runs on one io_context thread (the one that
// spawns the workers: PR_SET_PDEATHSIG follows the thread).
//
// The rest of the job is behind one seam, the rendezvous backend (rdzv/backend.hpp): single
// node, static, c10d or etcd. The workers start once the backend says the round formed and
// every node is ready; the first stop of an attempt anywhere (a failure, a signal, a hang, a
// lost node, or success everywhere) comes back as the attempt's notice, and every node ends the
// attempt the way the notice says. The Job never asks which backend it has.

#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "launcher/types/json.hpp"
#include "launcher/cluster/records.hpp"
#include "launcher/config/options.hpp"
#include "launcher/hangs/hang_monitor.hpp"
#include "launcher/hangs/stack_collector.hpp"
#include "launcher/host/slurm_step.hpp"
#include "launcher/job/job_policy.hpp"
#include "launcher/job/rank_plan.hpp"
#include "launcher/job/worker_env.hpp"
#include "launcher/job/workers_store.hpp"
#include "launcher/processes/leftovers.hpp"
#include "launcher/processes/spawner.hpp"
#include "launcher/processes/user_signals.hpp"
#include "launcher/rdzv/backend.hpp"
#include "launcher/report/console.hpp"
#include "launcher/report/failure_report.hpp"
#include "launcher/report/output_router.hpp"
#include "launcher/service/service_reporter.hpp"

namespace rankrun::launcher {

/// The most of a worker's error file (TORCHELASTIC_ERROR_FILE) that is read.
inline constexpr std::size_t k_error_file_max = 1 << 20;

inline double seconds_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

namespace gpu {
class GpuGuard;
}
namespace observe {
class Observer;
struct JobStatus;
}  // namespace observe

/// Where the job writes: attempt_N/<local_rank>/{stdout.log,stderr.log,error.json,stacks.txt}
/// under `run_dir`, as torchrun does; stack dumps in `stack_dir`. rankrun itself makes, opens
/// and reads what is in the run directory through `dir_fd` only, following no link
/// (files/run_dir.hpp); the paths are for the workers and the messages.
struct JobPaths {
  std::string run_dir;
  int dir_fd = -1;  // the run directory, open; it outlives the Job
  std::string stack_dir;
  std::string python_hook_dir;  // rankrun's sitecustomize.py for Python workers; "": none
  std::string worker_library;   // this rankrun's librankrun_worker (RANKRUN_WORKER_LIBRARY); "": not found
  bool logs_kept = false;       // --log-dir, --redirects or --tee: stacks are also saved per rank
};

/// The effects the job acts through; launch() wires the real ones, the tests fakes.
struct JobParts {
  Spawner& spawner;
  StackCollector& stacks;
  AttemptCleanup& cleanup;
  /// The rendezvous backend; unset: the one the configuration asks for (rdzv::make_backend).
  std::function<std::unique_ptr<rdzv::Backend>(rdzv::JobSide)> rendezvous = {};
  /// The node's GPUs between attempts and in the report; null: not checked.
  gpu::GpuGuard* gpus = nullptr;
  /// `rankrun status`, the event log and the metrics; null: none.
  observe::Observer* observer = nullptr;
};

class Job {
 public:
  /// Binds the store (throws LaunchError when it cannot). `config.command[0]` is a resolved path.
  Job(boost::asio::io_context& io, const LaunchConfig& config, EnvMap parent_env, JobPaths paths, JobParts parts);
  ~Job();
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  /// Runs the job to its end on the io_context; returns rankrun's exit code. `failed_checks`:
  /// the start checks this node failed (several nodes); the job then ends before any worker
  /// starts, on every node, naming this one.
  int run(const std::string& failed_checks = {});
  /// A signal rankrun received (SIGINT, SIGTERM, SIGHUP, SIGQUIT): forwarded to the workers.
  void signal_received(int signo);
  /// The port of the store the workers use (this node's store: node 0's in a multi-node job).
  std::uint16_t store_port() const;

 private:
  struct Worker {
    WorkerPlan plan;
    pid_t pid = -1;
    std::string error_file;  // its path, for the worker and the report
    std::string error_rel;   // the same file, relative to the run directory
    std::chrono::steady_clock::time_point started, ended;
    std::chrono::system_clock::time_point started_wall;  // `started`, by the clock workers record failures with
    bool ended_exact = true;  // false: rankrun saw the exit late, `ended` is the latest it can be
  };

  static std::vector<std::unique_ptr<Worker>> make_workers(const LaunchConfig& c);
  /// The current attempt's id in the agents' keys (cluster::attempt_id).
  int attempt_id() const;
  /// What the rendezvous backend hears from this node, and the hooks it calls.
  rdzv::JobSide job_side();
  rdzv::Hooks rendezvous_hooks();
  /// etcd: node rank 0 of the round hosts the workers' store on `host`.
  bool host_store(const std::string& host);
  /// The workers' store, when this node hosts it: workers only from the round's nodes.
  void admit_the_nodes_workers();
  void on_formed(rdzv::Round round);
  void on_rendezvous_failed(EarlyEnd end, std::string message);
  void on_job_lost(std::string why);
  void start_attempt();
  void begin_attempt(const action::StartAttempt& a);
  void on_notice(int attempt, cluster::StopNotice notice);
  void publish_local_stop();
  /// The held failure's wait for its stderr ended: publish it (or hold it as a victim's).
  void publish_held_failure();
  /// The job-wide stop notice of the current attempt, acted on (m_notice is set).
  void act_on_notice();
  /// A hang found here: on several nodes it is published first, and the ranks are held for the
  /// evidence window.
  void on_hang_found();
  /// Every node's ranks stay up for `longest` at most (the hang's evidence window, or a collective
  /// timeout's), then `then` runs (at once when a rank ends or the answers are in: end_evidence_hold).
  void hold_for_evidence(std::function<void()> then, std::chrono::steady_clock::duration longest);
  void end_evidence_hold();
  /// This node's ranks' progress for the node that decides the job's hangs (node rank 0, which
  /// hears every node's back).
  void share_progress(cluster::NodeProgress mine);
  /// Publishes `notice` as this node's stop of the current attempt.
  void send_local_stop(cluster::StopNotice notice);
  void end_early(const JobEnding& ending);
  void on_user_signal(int signo, pid_t sender);
  /// The --preempt-signal arrived: the job is marked preempted, and node 0 requeues it when asked.
  void announce_preemption();
  void stop_supervising();
  void shutdown();
  cluster::NodeFinal final_report(const RunSummary& summary) const;
  void start_worker(Worker& w, const AttemptSettings& attempt, int restart);
  AttemptSettings attempt_settings(int restart_count) const;
  void on_output(int slot, StreamId id, std::string_view bytes);
  void on_closed(int slot, StreamId id);
  void on_exited(int slot, ExitStatus status, ExitSeen seen);
  void on_store_event(int local_rank, StoreEvent event);
  RankStoreView store_view(int local_rank);
  void on_stop_signal(int signo, pid_t sender);
  void dispatch(const Event& event);
  void carry_out(const Action& action);
  void start_timer(boost::asio::steady_timer& timer, double seconds, Event event);
  void signal_workers(int signo);
  void clean_up();
  void start_drain();
  void after_drain();
  /// The job's state now, for `rankrun status` and the metrics (job_status.cpp); on a node that
  /// does not decide for the job, once every node's progress came (or a moment passed).
  void status(std::function<void(observe::JobStatus)> answer);
  observe::JobStatus local_status() const;
  /// One event for the event log: `type` and its JSON members.
  void log_event(std::string_view type, const Json& fields = nullptr) const;
  /// A rank's heartbeat in the event log: its step every WorkersStore::k_step_event_interval, and
  /// every section it enters or leaves.
  void log_progress(int rank, const WorkersStore::StepReport& report, bool section_changed) const;
  /// The job_ended event's members, from the summary.
  Json ended_fields(const RunSummary& summary) const;
  /// Local rank i's time since its start (to now while it runs): when rankrun saw it end, or its
  /// own record of its failure when rankrun saw that late; `exact` false: the latest it can be.
  struct RankTime {
    double seconds = 0;
    bool exact = true;
  };
  RankTime rank_time(std::size_t i, const std::optional<ExitStatus>& status) const;
  /// rankrun itself cannot go on (`what` says why): the job ends through the policy like any
  /// other stop (the live workers get their grace, the report names it, k_exit_internal).
  void own_failure(const std::string& what);
  void start_attempt_workers();
  void finish(int exit_code);
  RunSummary summarize(int exit_code);
  std::string attempt_dir(int restart_count) const;
  static std::string attempt_name(int restart_count) { return "attempt_" + std::to_string(restart_count); }
  /// Where the job stands, for systemd.
  ServiceSnapshot service_snapshot() const;
  void notify_status();

  boost::asio::io_context& m_io;
  const LaunchConfig& m_config;
  EnvMap m_parent_env;
  JobPaths m_paths;
  JobParts m_parts;
  bool m_default_omp = false;
  JobPolicy m_policy;
  Console m_console;
  std::vector<std::unique_ptr<Worker>> m_workers;
  OutputRouter m_output;
  std::string m_hostname;  // ${hostname} of --log-line-prefix-template
  WorkersStore m_store;    // the store this node hosts, if any, with its watch
  HangMonitor m_hang;
  UserSignals
      m_user_signals;  // SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 and the other stop signals, with their sender
  boost::asio::steady_timer m_grace_timer;
  boost::asio::steady_timer m_kill_timer;
  boost::asio::steady_timer m_drain_timer;
  bool m_draining = false;
  bool m_cleanup_unkillable = false;
  std::chrono::steady_clock::time_point m_job_start;
  int m_exit_code = 0;
  bool m_finished = false;
  bool m_shut_down = false;
  SlurmStep m_slurm;  // the Slurm step rankrun runs in, if any

  std::optional<long long> m_last_step;  // the highest step a runtime heartbeat reported
  std::chrono::steady_clock::time_point m_attempt_start;
  std::optional<cluster::NodeProgress> m_last_mine;  // the progress this node last shared
  int m_started = 0;                                 // workers of the attempt started so far
  std::string m_own_failure;                         // what rankrun could not do; "" none
  ServiceReporter m_service;                         // systemd's notify protocol (Type=notify)

  /// Several nodes: what this node knows of the job, whichever backend keeps it together (the
  /// Job's functions on it are in job_nodes.cpp).
  struct JobNodes {
    explicit JobNodes(boost::asio::io_context& io) : hold_timer(io), evidence_timer(io) {}
    int rank = 0;                         // this node's rank in the job (in the round: elastic)
    int round = -1;                       // elastic: the current round; -1: static, or none yet
    int round_first_attempt = 0;          // elastic: the policy's attempt when the round began
    bool formed = false;                  // the first round formed (one node: at once)
    bool between_rounds = false;          // elastic: the workers are gone, the next round not formed
    std::optional<cluster::NodeMap> map;  // several nodes: the round's
    std::string host;                     // this node's address, as the map shows it
    /// What this node knows of the current attempt among the others; begin_attempt() starts
    /// each attempt with a new one.
    struct AttemptAcrossNodes {
      std::optional<cluster::StopNotice> notice;  // the attempt's, once it came
      bool published = false;                     // this node's local stop was published (or is held)
      bool root_sent = false;                     // ... and it was this node's own failure, sent as the root cause
      bool tail_wait = false;                     // the root cause's stderr is read to its end first
      std::function<void()> evidence_then;        // what ends a hang's evidence window; null: no window
      bool awaiting_notice = false;               // cleaned up; the notice decides what is next
    };
    AttemptAcrossNodes attempt;
    boost::asio::steady_timer hold_timer;      // a failure's publication, held back (see publish_local_stop)
    boost::asio::steady_timer evidence_timer;  // a hang's evidence window (hold_for_evidence)
    bool store_host_lost = false;
  };
  JobNodes m_nodes;
  std::unique_ptr<rdzv::Backend> m_rdzv;  // after the store: it observes it until removed
};

}  // namespace rankrun::launcher
