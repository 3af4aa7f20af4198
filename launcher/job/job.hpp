#pragma once
// The one owner of a job's life on this node. It hosts the workers' store and watches its
// traffic, starts each attempt's workers through the Spawner, routes their output, watches for
// hangs, and turns everything that happens (exits, signals, timers, a hang, the cleanup's
// answer) into events for the pure JobPolicy, whose actions it carries out. It ends with the
// summary and rankrun's exit code. Everything runs on one io_context thread (the one that
// spawns the workers: PR_SET_PDEATHSIG follows the thread).
//
// In a multi-node job (nnodes > 1) node 0's Job hosts the store for every node; each node's Job
// has a NodeLink to it. The workers start after the rendezvous; the first stop of an attempt
// anywhere (a failure, a signal, a hang, a lost node, or success everywhere) is published as
// the attempt's notice, and every node ends the attempt the way the notice says. Node 0 keeps
// the store up until every node reported its result or was lost, then prints the job summary.

#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "launcher/cli/options.hpp"
#include "launcher/cluster/etcd_coordinator.hpp"
#include "launcher/cluster/lease_watch.hpp"
#include "launcher/cluster/node_link.hpp"
#include "launcher/cluster/records.hpp"
#include "launcher/cluster/round_host.hpp"
#include "launcher/hangs/hang_monitor.hpp"
#include "launcher/hangs/stack_collector.hpp"
#include "launcher/hangs/store_watch.hpp"
#include "launcher/job/job_policy.hpp"
#include "launcher/job/rank_plan.hpp"
#include "launcher/job/worker_env.hpp"
#include "launcher/processes/leftovers.hpp"
#include "launcher/processes/spawner.hpp"
#include "launcher/processes/user_signals.hpp"
#include "launcher/report/console.hpp"
#include "launcher/report/failure_report.hpp"
#include "launcher/report/output_router.hpp"
#include "launcher/service/service_reporter.hpp"
#include "rendezvous/store_server.hpp"

namespace rankrun::launcher {

/// Where the job writes: attempt_N/<local_rank>/{stdout.log,stderr.log,error.json,stacks.txt}
/// under `run_dir`, as torchrun does; stack dumps in `stack_dir`.
struct JobPaths {
  std::string run_dir;
  std::string stack_dir;
  std::string python_hook_dir;  // rankrun's sitecustomize.py for Python workers; "": none
  bool logs_kept = false;       // --log-dir, --redirects or --tee: stacks are also saved per rank
};

/// The effects the job acts through; launch() wires the real ones, the tests fakes.
struct JobParts {
  Spawner& spawner;
  StackCollector& stacks;
  AttemptCleanup& cleanup;
};

class Job {
 public:
  /// Binds the store (throws LaunchError when it cannot). `config.command[0]` is a resolved path.
  Job(boost::asio::io_context& io, const LaunchConfig& config, EnvMap parent_env, JobPaths paths, JobParts parts);
  ~Job();
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  /// Runs the job to its end on the io_context; returns rankrun's exit code.
  int run();
  /// A signal rankrun received (SIGINT, SIGTERM, SIGHUP, SIGQUIT): forwarded to the workers.
  void signal_received(int signo);
  /// The port of the store the workers use (this node's store: node 0's in a multi-node job).
  std::uint16_t store_port() const;
  /// The options of the store this node hosts, listening on `bind_address`.
  static rendezvous::ServerOptions store_options(const LaunchConfig& c, std::string bind_address);

 private:
  struct Worker {
    WorkerPlan plan;
    pid_t pid = -1;
    std::string error_file;
    std::chrono::steady_clock::time_point started, ended;
  };

  bool multi_node() const { return m_config.nnodes > 1 || m_config.elastic; }
  /// The current attempt's id in the agents' keys (cluster::attempt_id).
  int attempt_id() const;
  bool store_host() const { return m_store != nullptr; }
  /// This node coordinates the job's nodes (their leases, the rounds, the summary): the store
  /// host, or with etcd the rankrun elected there.
  bool coordinates() const;
  /// "the store host H:P" or "etcd at H:P", for messages.
  std::string rendezvous_where() const;
  /// A value of the agents' keys as the coordinator sees them.
  std::optional<std::string> agent_value(const std::string& key) const;
  // etcd (job_etcd.cpp): the election, the coordinator's watch, the workers' store on node
  // rank 0 of each round.
  void start_coordinator();
  void on_elected();
  void on_etcd_change(const rendezvous::EtcdEvent& e);
  void host_workers_store(int first_rank);
  /// The coordinator's view of the attempt round `round` runs (etcd; the last one opened).
  int running_attempt(int round) const;
  /// What node rank 0 opens an attempt with (etcd: "host:port" of the workers' store), and
  /// what the other nodes learn from it.
  std::string opened_value() const;
  void take_opened(const std::string& opened);
  void start_attempt();
  void begin_attempt(const action::StartAttempt& a);
  void start_link();
  void coordinate(cluster::RoundKeys* keys);
  void on_rendezvous(cluster::NodeMap map, int node_rank, std::string host, int round);
  void publish_membership(const std::string& why, int next_round, int next_nodes);
  void on_notice(int attempt, cluster::StopNotice notice);
  void on_node_lost(int node_rank);
  void publish_local_stop();
  void end_early(int exit_code);
  void on_user_signal(int signo, pid_t sender);
  void request_requeue();
  void linger(std::chrono::steady_clock::time_point deadline);
  void serve_last_answers();
  void stop_supervising();
  void shutdown();
  cluster::NodeFinal final_report(const RunSummary& summary) const;
  void start_worker(Worker& w, const AttemptSettings& attempt, const std::string& attempt_dir);
  AttemptSettings attempt_settings(int restart_count) const;
  void on_output(int slot, StreamId id, std::string_view bytes);
  void on_closed(int slot, StreamId id);
  void on_exited(int slot, ExitStatus status);
  void on_store_event(int local_rank, StoreEvent event);
  RankStoreView store_view(int local_rank);
  void on_stop_signal(int signo, pid_t sender);
  bool sent_by_slurm(pid_t sender) const;
  void dispatch(const Event& event);
  void carry_out(const Action& action);
  void start_timer(boost::asio::steady_timer& timer, double seconds, Event event);
  void signal_workers(int signo);
  void clean_up();
  void after_drain();
  void finish(int exit_code);
  RunSummary summarize(int exit_code);
  std::string attempt_dir(int restart_count) const;
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
  std::optional<StoreWatch> m_watch;  // declared before the store: the store reports to it until stopped
  std::unique_ptr<rendezvous::StoreServer> m_store;
  rendezvous::StoreServer::KeySpaceId m_key_space = 0;
  HangMonitor m_hang;
  UserSignals m_user_signals;  // SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, with their sender
  boost::asio::steady_timer m_grace_timer;
  boost::asio::steady_timer m_kill_timer;
  boost::asio::steady_timer m_drain_timer;
  bool m_draining = false;
  bool m_cleanup_unkillable = false;
  std::chrono::steady_clock::time_point m_job_start;
  int m_exit_code = 0;
  bool m_finished = false;
  bool m_shut_down = false;
  bool m_requeued = false;

  std::optional<long long> m_last_step;  // the highest step a runtime heartbeat reported
  ServiceReporter m_service;             // systemd's notify protocol (Type=notify)

  // Multi-node.
  std::unique_ptr<cluster::RoundKeys> m_round_keys;          // c10d: the store's agents' keys
  std::unique_ptr<cluster::EtcdCoordinator> m_coordinator;  // etcd: declared before the RoundHost using it
  std::string m_workers_host;                               // etcd: node rank 0's store for the workers
  std::uint16_t m_workers_port = 0;
  int m_key_space_attempt = 0;                              // the attempt whose key space the store serves
  std::unique_ptr<cluster::LeaseWatch> m_leases;  // node 0 only; declared after the store: removed first
  std::unique_ptr<cluster::RoundHost> m_rounds;    // elastic store host only; after the store too
  std::unique_ptr<cluster::NodeLink> m_link;
  int m_node_rank = 0;                            // this node's rank in the job (in the round: elastic)
  int m_round = -1;                               // elastic: the current round
  int m_round_first_attempt = 0;                  // elastic: the policy's attempt when the round began
  bool m_between_rounds = false;                  // elastic: the workers are gone, the next round not formed
  std::optional<cluster::NodeMap> m_map;          // after the rendezvous
  std::string m_host;                             // this node's address, as the map shows it
  std::optional<cluster::StopNotice> m_notice;    // the current attempt's, once it came
  bool m_published = false;                       // this attempt's local stop was published
  bool m_awaiting_notice = false;                 // cleaned up; the notice decides what is next
  bool m_store_host_lost = false;
  bool m_final_sent = false;
  bool m_all_final = false;
};

}  // namespace rankrun::launcher
