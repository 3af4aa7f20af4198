#pragma once
// What a node needs from the rest of its job, whichever rendezvous keeps the job together: the
// seam between the Job (the lifecycle of this node's workers) and the other nodes, as torch's
// RendezvousHandler is for its agent. One implementation per RdzvKind (LaunchConfig::rdzv):
//
//   Single  (--nnodes=1)    the job is this node: formed at once, nothing to publish (SingleNode)
//   Static  (--nnodes=N)    node 0 hosts the store; nodes claim their rank (StoreBackend)
//   C10d    (--nnodes=MIN:MAX) the store host keeps elastic rounds (StoreBackend, with rounds)
//   Etcd    (--rdzv-backend=etcd) a rankrun elected in etcd keeps the rounds; node rank 0 of
//           each round hosts the workers' store (EtcdBackend)
//
// Each multi-node backend builds its own channel to the other nodes (the TCP store's client,
// etcd's) and hands it to its NodeLink, which knows none of them; Channels lets a test put
// fakes in their place.
//
// The Job starts the backend, hears from it through Hooks (a round formed, the rendezvous
// failed, the attempt's job-wide stop notice, the job lost), and tells it what happens here
// (an attempt about to start, a local stop, this node's result). The backend never touches the
// workers; the Job never asks which backend it has. Everything runs on the Job's io_context.

#include <boost/asio/io_context.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "launcher/config/options.hpp"
#include "launcher/cluster/link_store.hpp"
#include "launcher/cluster/progress.hpp"
#include "launcher/cluster/records.hpp"
#include "rendezvous/store_server.hpp"

namespace rankrun::launcher::cluster {
class AgentsStore;  // round_host.hpp
class EtcdSession;  // etcd_coordinator.hpp
}  // namespace rankrun::launcher::cluster

namespace rankrun::launcher::rdzv {

/// A round of the job as this node sees it: the map of every node, this node's rank and
/// address in it, and the round's number (-1: a static job's only one). A single node's job has
/// no map.
struct Round {
  std::optional<cluster::NodeMap> map;
  int node_rank = 0;
  std::string host;
  int round = -1;
};

/// What the backend hears from the Job, and asks of it. Each is called on the io_context's
/// thread.
struct JobSide {
  /// The store this node hosts (the workers', and for static and c10d the agents' too); null
  /// when it hosts none (yet).
  std::function<rendezvous::StoreServer*()> store;
  /// etcd: node rank 0 of a round hosts the workers' store on `host`. false: it cannot (the
  /// Job has logged why).
  std::function<bool(const std::string& host)> host_store;
  /// The attempt now running, as the agents' keys name it (cluster::attempt_id).
  std::function<int()> attempt;
  /// The job has ended on this node (its summary is out, or it left before any worker).
  std::function<bool()> finished;
};

/// What the Job hears from the backend.
struct Hooks {
  /// A round formed (a single node: at once). The Job plans its workers and then asks
  /// before_attempt().
  std::function<void(Round round)> formed;
  /// The rendezvous failed, or the barrier before an attempt did (`message` is logged).
  std::function<void(EarlyEnd end, std::string message)> failed;
  /// The attempt's job-wide stop notice: the first one published, the same on every node.
  std::function<void(int attempt, cluster::StopNotice notice)> notice;
  /// This node cannot reach the rest of the job any more (the store host, etcd).
  std::function<void(std::string why)> lost;
  /// This node leaves before its workers start (it cannot do its part of the round).
  std::function<void(EarlyEnd end)> leave;
  /// The node waits for the other nodes (optional).
  std::function<void()> waiting;
};

class Backend {
 public:
  virtual ~Backend() = default;

  /// Starts the rendezvous; its result comes through `hooks`.
  virtual void start(Hooks hooks) = 0;
  /// Instead of start(): this node failed its checks; it ends the rendezvous for every node with
  /// `message`, then runs `done`.
  virtual void start_aborted(Hooks hooks, const std::string& message, std::function<void()> done) = 0;

  /// Where the workers find the store (MASTER_ADDR; MASTER_PORT when this node hosts none).
  virtual std::string workers_host() const = 0;
  virtual std::uint16_t workers_port() const = 0;
  /// " (this node hosts the store)" and the like, for the round's banner; "" when none.
  virtual std::string role(int node_rank) const = 0;
  /// "the store host H:P", "etcd at H:P", for messages.
  virtual std::string where() const = 0;

  /// `attempt`'s workers may start: `go` runs once every node is ready for it (at once where
  /// nothing needs waiting for). Not called again before `go` ran or the job ended.
  virtual void before_attempt(int attempt, std::function<void()> go) = 0;
  /// A membership change stopped this node's workers: join the next round (formed or failed).
  virtual void rejoin() = 0;
  /// This node's stop of `attempt` (a failure, a signal, a hang): the first one published stops
  /// every node.
  virtual void publish_stop(int attempt, cluster::StopNotice notice) = 0;
  /// This node's ranks all exited 0 in `attempt`.
  virtual void attempt_done(int attempt) = 0;
  /// This node's ranks' progress in `attempt`, for the node that decides the collectives' hangs
  /// for the whole job; on that node (`every_node` set) every node's latest comes back. A job
  /// of one node has nothing to share.
  virtual void share_progress(int /*attempt*/, const cluster::NodeProgress& /*mine*/,
                              std::function<void(std::vector<cluster::NodeProgress>)> /*every_node*/) {}
  /// The coordinator: seconds since each node's lease was refreshed, by node rank; empty
  /// elsewhere (`rankrun status`).
  virtual std::vector<double> lease_ages() const { return {}; }
  /// A stop signal while this node waits for a round: the wait ends (the other nodes hear why
  /// where they must), then `done`.
  virtual void abort_waiting(int signo, std::function<void()> done) = 0;
  /// The job ended here with `exit_code`. `result` (this node's rows; absent when its round
  /// never formed or the rest of the job is gone) goes to the coordinator, which serves the
  /// other nodes' until it has them all; `shut_down` runs when this node may stop.
  virtual void job_ended(int exit_code, std::optional<cluster::NodeFinal> result, std::function<void()> shut_down) = 0;
  /// This node leaves before any worker ran; `shut_down` runs when the nodes waiting on it have
  /// heard how (the store host serves a moment longer).
  virtual void leave_early(std::function<void()> shut_down) = 0;
  /// The end: the coordinator prints the job's summary (with `exit_code`, this node's), every
  /// thread and timer stops. Nothing is called afterwards.
  virtual void stop(int exit_code) = 0;
};

/// What a multi-node backend talks to besides the Job. Each one left empty is the real one,
/// which the backend builds from the configuration; a test gives fakes.
struct Channels {
  /// The nodes' channel: a new connection to the TCP store, or to etcd.
  std::function<std::unique_ptr<cluster::LinkStore>(const cluster::LinkConnect& how)> link;
  /// Static, c10d: the agents' keys of the store this node hosts, as its coordinator watches
  /// them (default: `store`'s own).
  std::function<std::unique_ptr<cluster::AgentsStore>(rendezvous::StoreServer& store)> hosted;
  /// etcd: a connection of the coordinator's (the election, the watch, its answers).
  std::function<std::unique_ptr<cluster::EtcdSession>()> etcd;
};

/// The backend `config.rdzv` asks for.
std::unique_ptr<Backend> make_backend(boost::asio::io_context& io, const LaunchConfig& config, JobSide side,
                                      Channels channels = {});

/// The options of a store this node hosts, listening on `bind_address`.
rendezvous::ServerOptions store_options(const LaunchConfig& config, std::string bind_address);
/// The store this node hosts from the start (config.hosts_store): the workers' on one node, node
/// 0's for every node (static), the rendezvous endpoint's (c10d). nullptr when a c10d node finds
/// the endpoint's port taken on its own machine: another node there hosts it. Throws
/// LaunchError when it cannot bind.
std::unique_ptr<rendezvous::StoreServer> open_store(boost::asio::io_context& io, const LaunchConfig& config);

}  // namespace rankrun::launcher::rdzv
