#pragma once
// The store host's view of the nodes, from the store's own traffic (an observer, no polling):
// each node's lease refreshes, its "all ranks exited 0" for an attempt, and its final report.
// A node whose lease has not been refreshed for --node-timeout is lost. Runs on the store's
// io_context thread; time this thread did not run (a starved or paused rankrun) is not counted
// against the nodes: their refreshes may be waiting, unread, in its sockets.

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <vector>

#include "rendezvous/store_server.hpp"

namespace rankrun::launcher::cluster {

class LeaseWatch : public rendezvous::StoreObserver {
 public:
  struct Hooks {
    std::function<void(int node_rank)> lost;    // once per node
    std::function<void(int attempt)> all_done;  // every node's ranks exited 0 in `attempt`
    std::function<void()> all_final;            // every node reported its result or was lost
  };

  LeaseWatch(boost::asio::io_context& io, int nnodes, std::chrono::milliseconds node_timeout, Hooks hooks);
  ~LeaseWatch() override;

  /// From now on (the rendezvous is complete) a lease that lapses is a lost node.
  void start();
  /// An elastic job's next round: `nnodes` nodes whose leases are `lease_prefix`<node rank>;
  /// what was known about the round before is forgotten. Starts watching.
  void start_round(int nnodes, std::string lease_prefix);
  void stop();
  /// The node this watch runs on (the coordinator's own rank in the round, -1: none): its lease
  /// is not timed, since the watch running proves it alive.
  void set_self(int node_rank) { m_self = node_rank; }
  /// etcd: the nodes' leases are etcd's, which the watch does not see refreshed; a node is lost
  /// when lapsed() says its lease key went.
  void use_external_leases() { m_external = true; }
  void lapsed(int node_rank);
  const std::set<int>& lost() const { return m_lost; }
  /// Seconds since each node's lease was last refreshed, by node rank (its own: 0).
  std::vector<double> lease_ages() const;
  const std::set<int>& finals() const { return m_final; }

  void on_join(std::uint64_t conn, rendezvous::KeySpaceId space, std::string_view name) override;
  void on_close(std::uint64_t conn) override;
  void on_request(std::uint64_t conn, rendezvous::Op op, std::string_view first_key) override;

 private:
  using Clock = std::chrono::steady_clock;
  void arm();
  void check();
  void check_all_final();

  boost::asio::io_context& m_io;
  int m_nnodes;
  std::string m_lease_prefix = "lease/";
  std::chrono::milliseconds m_node_timeout;
  Hooks m_hooks;
  boost::asio::steady_timer m_timer;
  bool m_started = false;
  bool m_stopped = false;
  bool m_all_final_told = false;
  bool m_external = false;
  int m_self = -1;
  Clock::time_point m_next_check{};  // when the timer was due
  std::set<std::uint64_t> m_agents;  // connections in the agents' key space
  std::vector<Clock::time_point> m_last_lease;
  std::set<int> m_lost;
  std::set<int> m_final;
  std::map<int, std::set<int>> m_done;  // attempt -> nodes whose ranks all exited 0
};

}  // namespace rankrun::launcher::cluster
