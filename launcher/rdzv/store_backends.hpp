#pragma once
// The backends whose rendezvous is kept in the store that one rankrun hosts, one class for both
// kinds (LaunchConfig::rdzv):
//   Static  (--nnodes=N): node 0 hosts the store, each node claims its --node-rank, node 0 times
//           every node's lease and publishes the lost ones;
//   C10d    (--nnodes=MIN:MAX): the rendezvous endpoint's host keeps elastic rounds as well
//           (RoundHost over the store's agents' keys); a lost or new node starts a round.
// Every node's link reaches the store over the TCP store's client (store_channel()). The store
// host stays up a moment after the job (linger) so that the waiting nodes read how it ended.

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "launcher/cluster/link_store.hpp"
#include "launcher/cluster/round_host.hpp"
#include "launcher/rdzv/linked_backend.hpp"

namespace rankrun::launcher::rdzv {

class StoreBackend final : public LinkedBackend {
 public:
  StoreBackend(boost::asio::io_context& io, const LaunchConfig& config, JobSide side, Channels channels);
  ~StoreBackend() override;

  std::string role(int node_rank) const override;
  std::string where() const override;
  void abort_waiting(int signo, std::function<void()> done) override;
  void leave_early(std::function<void()> shut_down) override;

 private:
  cluster::LinkChannel channel() const override;
  std::function<bool(int node_rank)> attempt_opener() const override;
  void coordinate() override;
  bool coordinates() const override { return m_side.store() != nullptr; }
  std::optional<std::string> agent_value(const std::string& key) const override;
  void on_node_lost(int node_rank) override;
  void log_start() const override;
  bool opens_attempts() const override { return coordinates(); }
  void formed_here(int round, int nodes) override;
  void serve_last_answers() override;
  /// The store serves until the agents have hung up, `deadline` at the latest; then shut down.
  void linger(std::chrono::steady_clock::time_point deadline);

  const bool m_elastic;                            // c10d: the store host keeps rounds
  std::unique_ptr<cluster::AgentsStore> m_agents;  // the store host's: the agents' keys and traffic
};

/// The channel of a node to the TCP store at `host`:`port` (node 0's, or the c10d endpoint's),
/// in the agents' key space, proving the job's secret (or taking it from the store host's MUNGE
/// credential with the first connection), with the store's refusals and messages.
cluster::LinkChannel store_channel(const LaunchConfig& config, const std::string& host, std::uint16_t port);

}  // namespace rankrun::launcher::rdzv
