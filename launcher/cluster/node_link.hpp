#pragma once
// One node's link to the rest of the job, over the channel its backend builds (LinkChannel: a
// way to connect, and what to say of the endpoint; the link knows no backend by name): the
// rendezvous (static, or an elastic round), the node's lease, the watch for the attempt's stop
// notice, and the commands the Job sends (publish a notice, a node's result, the restart
// barrier). Two threads, each with its own blocking connection, in the agents' key space:
//   - the watcher: connects (reporting an unreachable endpoint within seconds and retrying until
//     the rendezvous timeout), rendezvouses, then waits for stop/<attempt> a lease interval at a
//     time and refreshes lease/<node> in between: event-driven, a constant few requests per
//     second per node. When it cannot reach the store host for --node-timeout it reports it.
//   - the commander: runs the Job's commands in order.
// Everything it learns reaches the Job as a handler posted to the Job's io_context. The protocol
// steps themselves (static_rendezvous, elastic_join, attempt_steps) are free functions on one
// connection; the threads run them and post what they return.

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "launcher/cluster/attempt_steps.hpp"
#include "launcher/cluster/elastic_join.hpp"
#include "launcher/cluster/link_store.hpp"
#include "launcher/cluster/progress.hpp"
#include "launcher/cluster/records.hpp"
#include "launcher/cluster/static_rendezvous.hpp"
#include "base/unique_fd.hpp"

namespace rankrun::launcher::cluster {

struct LinkSettings {
  /// The channel to the rest of the job, and what the link must know of it (its backend's).
  LinkChannel channel;
  int node_rank = 0;
  int nnodes = 1;
  int nproc = 1;
  std::string local_addr;  // --local-addr; empty: the address the store host sees this node at
  std::string run_id;
  std::chrono::milliseconds rdzv_timeout{std::chrono::seconds(900)};
  std::chrono::milliseconds node_timeout{std::chrono::seconds(15)};
  /// An elastic job (--nnodes=MIN:MAX): the node asks the coordinator for a round
  /// (join/<instance>) instead of claiming `node_rank`; after a membership change it joins the
  /// next one (rejoin()). `nnodes` and `node_rank` are then the round's.
  bool elastic = false;
  /// Whether this node, at `node_rank` in the round, opens each attempt for the others once
  /// every node is ready (the store host; a round's node rank 0). Empty: it does not.
  std::function<bool(int node_rank)> opens_attempts;
};

/// Called on the io_context's thread, never after stop().
struct LinkHandlers {
  /// The rendezvous (or an elastic round, `round` >= 0; static: -1) is complete.
  std::function<void(NodeMap map, int my_node_rank, std::string my_host, int round)> rendezvous_done;
  std::function<void(EarlyEnd end, std::string message)> rendezvous_failed;
  /// The stop notice of `attempt` (the first one published; the watcher then moves on to the
  /// next attempt's).
  std::function<void(int attempt, StopNotice notice)> notice;
  /// The channel's endpoint cannot be reached any more (for --node-timeout), or refuses this
  /// node for good.
  std::function<void(std::string why)> lost;
};

class NodeLink {
 public:
  NodeLink(boost::asio::io_context& io, LinkSettings settings, LinkHandlers handlers);
  ~NodeLink();
  NodeLink(const NodeLink&) = delete;
  NodeLink& operator=(const NodeLink&) = delete;

  /// Starts the rendezvous; its result comes back through the handlers.
  void start();
  /// Instead of start(): this node does not join; it only ends the rendezvous for every node
  /// with `message` (it failed its checks). `done` runs once that is published or could not be.
  void start_aborted(const std::string& message, std::function<void()> done);

  // Commands, run in order on the commander's connection; one that fails is tried again on a
  // fresh connection until --node-timeout has passed since its first try. `done` callbacks are
  // posted to the io_context; a command that could not be delivered still calls them.
  /// Compare-and-set of stop/<attempt>: the first notice wins; every node, this one included,
  /// hears the winner through the `notice` handler.
  void publish_stop(int attempt, StopNotice notice);
  /// This node's ranks all exited 0 in `attempt`.
  void attempt_done(int attempt);
  /// The restart barrier before `attempt` starts its workers: this node is ready; `go` runs
  /// when the attempt may start (the coordinator: once every node is ready; the others: once
  /// it opened it, with the value it opened it with).
  void ready_for(int attempt, std::function<void(std::string opened)> go);
  /// The node that opens attempts (LinkSettings::opens_attempts): `attempt`'s key space exists,
  /// the nodes may start its workers; `value` is what they take from it (the workers' store,
  /// "host:port", where each round's node rank 0 hosts it).
  void open_attempt(int attempt, std::string value = "1");
  /// This node's progress in `attempt` (progress/<attempt>/<node rank>); with `every_node`, every
  /// node's of the `nodes` that have one then comes back. Progress waiting to be sent is replaced
  /// by newer: a slow store never queues more than one.
  void share_progress(int attempt, std::string progress, int nodes,
                      std::function<void(std::vector<NodeProgress>)> every_node);
  /// This node's result for the store host's summary; `done` hears whether it was delivered.
  void publish_final(const NodeFinal& final_result, std::function<void(bool delivered)> done);
  /// During the rendezvous (Ctrl-C while nodes are missing): ends it for every node with
  /// `message`; `done` runs once it is published or could not be.
  void abort_rendezvous(const std::string& message, std::function<void()> done);

  /// Elastic: after a membership notice (and this node's cleanup), ask for the next round; the
  /// answer comes through rendezvous_done or rendezvous_failed.
  void rejoin();

  /// Ends both threads (blocked calls are interrupted); no handler runs afterwards.
  void stop();

 private:
  void watcher_main();
  void commander_main();
  bool rendezvous(LinkStore& client);
  bool join_round(std::unique_ptr<LinkStore>& client);
  /// The node rank and node count of the current round (the static rendezvous: the settings').
  std::pair<int, int> place() const;
  std::unique_ptr<LinkStore> connect_for_rendezvous();
  /// `cancellable`: stop() cuts the connect short (every connect but the one stop() itself makes).
  std::unique_ptr<LinkStore> connect(std::chrono::milliseconds connect_timeout, bool cancellable = true);
  /// Where the store has leases: this node's, granted for its first round and kept while it
  /// lives; 0 elsewhere.
  std::int64_t node_lease(LinkStore& client);
  /// The channel's endpoint, for messages.
  const std::string& where() const { return m_settings.channel.where; }
  /// The channel says no retry changes `e`.
  bool denied(const rendezvous::StoreError& e) const;
  /// A client's error without the endpoint it names again.
  static std::string reason(const rendezvous::StoreError& e);
  /// true: a membership notice came (elastic), the node joins the next round after rejoin().
  bool watch(std::unique_ptr<LinkStore>& client);
  struct Command {
    std::function<void(LinkStore&)> run;
    bool before_rendezvous = false;  // may run while the rendezvous is still going on
  };
  void enqueue(std::function<void(LinkStore&)> command, bool before_rendezvous = false);
  /// Runs `command` on `client` (connecting it when null), again on a fresh connection after a
  /// failure, until --node-timeout has passed since the first try or the link stops.
  void deliver(const std::function<void(LinkStore&)>& command, std::unique_ptr<LinkStore>& client);
  /// Between the barrier's slices: runs the commands queued meanwhile on `client`, oldest
  /// first, each removed once it ran; false when the link stops.
  bool run_queued(LinkStore& client);
  void post_when_done(std::function<void(LinkStore&)>& command, std::function<void(bool delivered)> done);
  void post(std::function<void()> fn);
  /// Posts the rendezvous_failed handler with `failure`.
  void fail(RendezvousFailure failure);
  bool stopping() const;
  using Clock = std::chrono::steady_clock;
  using milliseconds = std::chrono::milliseconds;
  /// The pauses between a try and the next (a command's, a round's join): doubling from the
  /// first up to the last.
  static constexpr milliseconds k_retry_first_pause{50};
  static constexpr milliseconds k_retry_max_pause{1000};
  /// The link's two threads: the watcher (rendezvous, leases, the notice) and the commands'.
  enum class Side { Watcher, Commands };
  /// The client `side` is using now (nullptr: none), which stop() interrupts.
  void set_interruptible(Side side, LinkStore* client);
  /// `side`'s connection, made when there is none, in one try as long as a reply may take and
  /// not past `give_up` (stop() cannot interrupt a connect in progress). Throws StoreError.
  LinkStore& reconnect(Side side, std::unique_ptr<LinkStore>& client, Clock::time_point give_up);
  /// After `side`'s connection failed: it is closed, and reconnect() makes a fresh one.
  void drop(Side side, std::unique_ptr<LinkStore>& client);

  boost::asio::io_context& m_io;
  LinkSettings m_settings;
  LinkHandlers m_handlers;
  std::string m_instance;
  std::shared_ptr<bool> m_alive;  // false once stop() ran: posted handlers then do nothing
  UniqueFd m_cancel;              // an eventfd, readable once stop() ran: connects in progress end

  mutable std::mutex m_mutex;
  std::condition_variable m_wake;
  bool m_stopping = false;
  bool m_rendezvous_done = false;
  bool m_rejoin = false;
  int m_node_rank = 0;  // in the current round
  int m_nnodes = 1;
  int m_round = -1;  // elastic: the current round; -1: none yet, or static
  int m_watch_attempt = 0;
  std::int64_t m_lease = 0;  // the node's lease, where the store has them (watcher thread; read by stop() after it)
  NodeLease m_round_lease;   // the running round's lease key (watcher thread), kept fresh until rejoin
  std::deque<Command> m_commands;
  // The progress the next share command sends (under m_mutex); a command is queued only when
  // none is waiting.
  struct SharedProgress {
    int attempt = 0;
    std::string text;
    int nodes = 0;
    std::function<void(std::vector<NodeProgress>)> every_node;
  };
  std::optional<SharedProgress> m_progress;
  LinkStore* m_watcher_client = nullptr;    // for interrupt(), under m_mutex
  LinkStore* m_commander_client = nullptr;  // for interrupt(), under m_mutex
  std::thread m_watcher;
  std::thread m_commander;
};

}  // namespace rankrun::launcher::cluster
