#pragma once
// The coordinator's side of an elastic job's rounds: it learns of each node's join/<instance>
// (c10d: in the store's traffic, as an observer; etcd: from a watch, through joined() and
// left()), feeds the RoundKeeper, and writes its answers where the nodes read them: the round's
// map, each node's assign/<instance>, spare notices, the waiting line (rdzv/status). Runs on
// the io_context thread.

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "launcher/cluster/rounds.hpp"
#include "rendezvous/store_server.hpp"

namespace rankrun::launcher::cluster {

/// Where a RoundHost reads the nodes' joins and writes its answers (the agents' keys).
class RoundKeys {
 public:
  virtual ~RoundKeys() = default;
  virtual std::optional<std::string> value(const std::string& key) = 0;
  /// In order: a node that reads a later key finds the earlier ones.
  virtual void set(const std::string& key, const std::string& value) = 0;
};
/// The agents' key space of the store this node hosts, as its coordinator uses it (static,
/// c10d): the keys, their traffic (observers, as the store's: on its io_context thread), and the
/// agents connected. The seam between the coordinator's parts and the store (tests fake it).
class AgentsStore : public RoundKeys {
 public:
  virtual void add_observer(rendezvous::StoreObserver* observer) = 0;
  virtual void remove_observer(rendezvous::StoreObserver* observer) = 0;
  /// The agents' connections open now.
  virtual std::size_t connections() const = 0;
};
/// The agents' key space of `store`, which this node hosts.
std::unique_ptr<AgentsStore> store_keys(rendezvous::StoreServer& store);

class RoundHost : public rendezvous::StoreObserver {
 public:
  struct Hooks {
    /// The running round must end (a node arrived, or one was lost): `why`, the next round and
    /// how many nodes it expects.
    std::function<void(const std::string& why, int next_round, int next_nodes)> restart;
    /// A round closed (for the record).
    std::function<void(const RoundRecord& round)> closed;
  };

  RoundHost(boost::asio::io_context& io, RoundKeys& keys, RoundRules rules, Hooks hooks);
  ~RoundHost() override;

  /// A member of the running round lost its lease.
  void lost(int node_rank);
  /// etcd: join/<instance> was written (the record is read from the keys) or went away (the
  /// node's lease ended: it stopped, or was lost, while it waited).
  void joined(const std::string& instance);
  void left(const std::string& instance);
  /// A new coordinator took over a job whose round `round` runs with `members` (etcd): the
  /// keeper goes on from there.
  void resume(int round, std::vector<NodeRecord> members);
  /// The job is over: the waiting nodes and every later one are told so; `failed`: it ended
  /// before it ran (they exit as from a failed rendezvous, not a closed one).
  void close_job(const std::string& message, bool failed = false);
  void stop();
  const RoundKeeper& keeper() const { return m_keeper; }

  void on_join(std::uint64_t conn, rendezvous::KeySpaceId space, std::string_view name) override;
  void on_close(std::uint64_t conn) override;
  void on_request(std::uint64_t conn, rendezvous::Op op, std::string_view first_key) override;

 private:
  void apply(const RoundStep& step);
  void set(const std::string& key, const std::string& value);
  void arm();

  boost::asio::io_context& m_io;
  RoundKeys& m_keys;
  RoundRules m_rules;
  Hooks m_hooks;
  RoundKeeper m_keeper;
  boost::asio::steady_timer m_timer;
  std::set<std::uint64_t> m_agents;                // connections in the agents' key space
  std::map<std::uint64_t, std::string> m_joiners;  // connection -> instance that joined on it
  std::string m_closed_message;
  bool m_failed = false;
  std::string m_status;
  RoundKeeper::Clock::time_point m_status_at{};
  bool m_stopped = false;
};

}  // namespace rankrun::launcher::cluster
