#pragma once
// The store this node hosts, if it hosts one: the workers' (and for the static and c10d
// rendezvous the agents' too), a fresh key space for each attempt, and the watch on its
// traffic that tells the hang monitor what each rank does (its arrival, heartbeats, steps,
// collectives). A node whose workers use another node's store hosts none.

#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "launcher/hangs/hang_monitor.hpp"
#include "launcher/hangs/step_rate.hpp"
#include "launcher/hangs/store_watch.hpp"
#include "rendezvous/store_server.hpp"

namespace rankrun::launcher {

class WorkersStore {
 public:
  /// `server`: the store hosted from the start, or null. `first_rank`: this node's first global
  /// rank, which names the runtime's keys. `events` hears what the ranks do in it.
  WorkersStore(boost::asio::io_context& io, std::unique_ptr<rendezvous::StoreServer> server, int first_rank,
               StoreWatch::Listener events);
  ~WorkersStore();
  WorkersStore(const WorkersStore&) = delete;
  WorkersStore& operator=(const WorkersStore&) = delete;

  /// Hosts `server` from now on (etcd: node rank 0 of a round), with `attempt`'s key space.
  void host(std::unique_ptr<rendezvous::StoreServer> server, int first_rank, int attempt);
  rendezvous::StoreServer* server() { return m_server.get(); }
  const rendezvous::StoreServer* server() const { return m_server.get(); }
  std::uint16_t port() const { return m_server ? m_server->port() : 0; }

  /// A round gave this node other ranks.
  void set_first_rank(int first_rank);
  /// `attempt`'s workers (`pids`) start: new connections join its key space (the attempt
  /// before's ends: a restarted worker must not read its stale keys, NCCL ids or barrier
  /// counters).
  void start_attempt(int attempt, const std::vector<pid_t>& pids);
  /// What the store shows of global rank `rank` (local `local_rank`): its collective, its
  /// heartbeat's age and step, the last key it used.
  RankStoreView view(int local_rank, int rank);
  /// Only what its heartbeat says (step, rate, section, batches): no connection is mapped.
  RankStoreView heartbeat_view(int local_rank, int rank) const;
  /// What a heartbeat said.
  struct StepReport {
    long long step = -1;
    std::optional<RankSection> section;
    std::optional<double> per_second;
    bool periodic = false;  // the rank's first report, or the first for k_step_event_interval
    bool called = false;    // a heartbeat of the trainer's calls (rankrun.progress) counted new ones: it moves
  };
  static constexpr std::chrono::seconds k_step_event_interval{30};
  /// After a heartbeat event: `then` gets what it reported, once the store has applied it (and
  /// not if the attempt changed meanwhile).
  void read_step(int local_rank, int rank, std::function<void(const StepReport&)> then);
  /// Maps the store's connections not yet mapped to their ranks, while the workers still hold
  /// them (before they are stopped: a dead worker's connections cannot be told).
  void map_connections();
  /// Who reached the store, and when, for the summary.
  std::vector<Arrival> arrivals();
  /// The connections that closed before they were matched to a rank.
  UnmatchedConnections unmatched_connections() const;
  /// Two workers that registered the same rank in init_process_group, if any.
  std::optional<DuplicateRank> duplicate_rank();
  /// The store stops serving.
  void stop();

 private:
  void watch(int first_rank);
  void add_heartbeat(RankStoreView& view, int local_rank, int rank) const;

  boost::asio::io_context& m_io;
  StoreWatch::Listener m_events;
  std::optional<StoreWatch> m_watch;  // before the server: it reports to the watch until stopped
  std::unique_ptr<rendezvous::StoreServer> m_server;
  rendezvous::StoreServer::KeySpaceId m_key_space = 0;
  int m_key_space_attempt = 0;  // the attempt whose key space new connections join
  bool m_stopped = false;
  std::vector<StepRate> m_rates;                      // by local rank, this attempt
  std::vector<std::optional<std::uint64_t>> m_calls;  // by local rank: the last calls= count
};

}  // namespace rankrun::launcher
