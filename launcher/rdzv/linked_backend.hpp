#pragma once
// The part every multi-node backend shares: this node's NodeLink (the rendezvous, its lease,
// the watch for the attempt's stop notice, the barrier before each attempt, its result), and,
// where this node coordinates the job, the nodes' leases and results (LeaseWatch) and the
// elastic rounds (RoundHost). What differs between the store's backends (static, c10d) and
// etcd's is in the virtual functions below, each overridden by the two: the channel the link
// runs on first of all. The hierarchy stops there: Backend, LinkedBackend, StoreBackend and
// EtcdBackend.

#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "launcher/cluster/lease_watch.hpp"
#include "launcher/cluster/node_link.hpp"
#include "launcher/cluster/round_host.hpp"
#include "launcher/rdzv/backend.hpp"

namespace rankrun::launcher::rdzv {

class LinkedBackend : public Backend {
 public:
  LinkedBackend(boost::asio::io_context& io, const LaunchConfig& config, JobSide side, Channels channels);
  ~LinkedBackend() override;

  void start(Hooks hooks) final;
  void start_aborted(Hooks hooks, const std::string& message, std::function<void()> done) final;
  /// The endpoint's host; the store host reached over loopback (TorchX's localhost) gives its
  /// workers the name the other machines know it by, so every worker sees one MASTER_ADDR.
  std::string workers_host() const override;
  std::uint16_t workers_port() const override;
  void before_attempt(int attempt, std::function<void()> go) override;
  void rejoin() final;
  void publish_stop(int attempt, cluster::StopNotice notice) final;
  void attempt_done(int attempt) final;
  void share_progress(int attempt, const cluster::NodeProgress& mine,
                      std::function<void(std::vector<cluster::NodeProgress>)> every_node) final;
  void job_ended(int exit_code, std::optional<cluster::NodeFinal> result, std::function<void()> shut_down) final;
  void leave_early(std::function<void()> shut_down) override;
  std::vector<double> lease_ages() const override;
  void stop(int exit_code) final;

 protected:
  /// How long the coordinator keeps serving after the job for the nodes still reading how it
  /// ended (the store host's linger), and waits past --node-timeout for results (etcd).
  static constexpr std::chrono::seconds k_linger{2};

  /// What start() and start_aborted() share: the coordinator's parts and the link.
  void prepare(Hooks hooks);
  /// The link's settings: what every backend shares, and its channel (channel()), whose
  /// connections a test's Channels::link replaces.
  cluster::LinkSettings link_settings() const;
  /// The backend's channel to the other nodes (its connections, how its endpoint is named, its
  /// refusals).
  virtual cluster::LinkChannel channel() const = 0;
  /// Whether the node at a node rank of the round opens each attempt for the others, as the
  /// link decides it before the barrier (LinkSettings::opens_attempts).
  virtual std::function<bool(int node_rank)> attempt_opener() const = 0;
  /// Sets up what this node coordinates, if anything (make_leases(), make_rounds()).
  virtual void coordinate() = 0;
  /// This node coordinates the job's nodes now (their leases, the rounds, the summary).
  virtual bool coordinates() const = 0;
  /// A value of the agents' keys as the coordinator sees them.
  virtual std::optional<std::string> agent_value(const std::string& key) const = 0;
  /// The coordinator: node `node_rank`'s lease lapsed.
  virtual void on_node_lost(int node_rank) = 0;
  /// The first line this node logs about the rendezvous.
  virtual void log_start() const = 0;
  /// This node opens each attempt for the others (the store host; etcd: node rank 0).
  virtual bool opens_attempts() const = 0;
  /// The job's very first attempt waits for the barrier too (etcd: the nodes learn the
  /// workers' store there).
  virtual bool first_attempt_waits() const { return false; }
  /// What an attempt is opened with, and what the other nodes take from it.
  virtual std::string opened_value() const { return "1"; }
  virtual void take_opened(const std::string& /*opened*/) {}
  /// A round formed with this node in it; `nodes`: how many.
  virtual void formed_here(int /*round*/, int /*nodes*/) {}
  /// Membership notices are published once this node has a map (etcd: always; the coordinator
  /// need not be a member), for this attempt.
  virtual bool publishes_membership() const { return m_map.has_value(); }
  virtual int membership_attempt(int /*next_round*/) const { return m_side.attempt(); }
  /// The coordinator, once every node's result is in: the nodes still waiting have been told
  /// the job is over; by default it shuts down at once.
  virtual void serve_last_answers() { shut_down(); }
  /// Every node's result is in (the coordinator's LeaseWatch says so).
  virtual void all_final() {}
  /// The coordinator sent its result and waits for the others'; by default their leases bound
  /// the wait (LeaseWatch calls them lost).
  virtual void wait_for_finals() {}
  /// Before the threads stop (etcd: the coordinator's last answers).
  virtual void before_stop() {}

  /// The coordinator's parts: the nodes' leases, and the rounds over `keys` (elastic).
  void make_leases();
  void make_rounds(cluster::RoundKeys& keys, std::function<void(const cluster::RoundRecord&)> closed);
  /// Stops the link and drops the coordinator's parts (the leases, the rounds): the backends'
  /// destructors call it before the keys those parts use go.
  void stop_parts();
  void publish_membership(const std::string& why, int next_round, int next_nodes);
  bool finished() const { return m_side.finished(); }
  void shut_down();

  boost::asio::io_context& m_io;
  const LaunchConfig& m_config;
  JobSide m_side;
  Channels m_channels;
  Hooks m_hooks;
  std::unique_ptr<cluster::LeaseWatch> m_leases;  // the coordinator's
  std::unique_ptr<cluster::RoundHost> m_rounds;   // the coordinator's, elastic
  std::unique_ptr<cluster::NodeLink> m_link;
  std::optional<cluster::NodeMap> m_map;  // the current round's
  int m_node_rank = 0;                    // this node's, in the round
  std::string m_host;                     // this node's address, as the map shows it
  boost::asio::steady_timer m_timer;      // the coordinator's wait for results; the store host's linger
  std::function<void()> m_shut_down;
  bool m_final_sent = false;
  bool m_all_final = false;
  bool m_stopped = false;
};

}  // namespace rankrun::launcher::rdzv
