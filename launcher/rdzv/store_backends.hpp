#pragma once
// The backends whose rendezvous is kept in the store that one rankrun hosts:
//   StoreBackend  static (--nnodes=N): node 0 hosts the store, each node claims its --node-rank,
//                 node 0 times every node's lease and publishes the lost ones;
//   C10dBackend   c10d (--nnodes=MIN:MAX): the rendezvous endpoint's host keeps elastic rounds
//                 (RoundHost over the store's agents' keys); a lost or new node starts a round.
// The store host stays up a moment after the job (linger) so that the waiting nodes read how
// it ended.

#include <chrono>

#include "launcher/rdzv/linked_backend.hpp"

namespace rankrun::launcher::rdzv {

class StoreBackend : public LinkedBackend {
 public:
  using LinkedBackend::LinkedBackend;
  ~StoreBackend() override;

  std::string role(int node_rank) const override;
  std::string where() const override;
  void abort_waiting(int signo, std::function<void()> done) override;
  void leave_early(std::function<void()> shut_down) override;

 protected:
  void coordinate() override;
  bool coordinates() const override { return m_side.store() != nullptr; }
  std::optional<std::string> agent_value(const std::string& key) const override;
  void on_node_lost(int node_rank) override;
  void log_start() const override;
  bool opens_attempts() const override { return coordinates(); }
  void formed_here(int round, int nodes) override;
  /// The store serves until the agents have hung up, `deadline` at the latest; then shut down.
  void linger(std::chrono::steady_clock::time_point deadline);
};

class C10dBackend final : public StoreBackend {
 public:
  using StoreBackend::StoreBackend;

  void abort_waiting(int signo, std::function<void()> done) override;

 protected:
  void coordinate() override;
  void log_start() const override;
  void serve_last_answers() override;
};

}  // namespace rankrun::launcher::rdzv
