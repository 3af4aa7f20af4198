#pragma once
// --rdzv-backend=etcd: every rankrun campaigns in etcd; the one elected keeps the rounds
// (EtcdCoordinator: it watches the job's keys and writes the answers), whether or not it is a
// member of them, and another takes over when it is lost. Each node's lease is an etcd lease.
// Node rank 0 of each round hosts the workers' store and opens each attempt with its address,
// which the other nodes take from the barrier before every attempt, the first included. Every
// node's link reaches etcd over etcd's client (etcd_channel()).

#include <memory>

#include "launcher/cluster/etcd_coordinator.hpp"
#include "launcher/rdzv/linked_backend.hpp"

namespace rankrun::launcher::rdzv {

class EtcdBackend final : public LinkedBackend {
 public:
  using LinkedBackend::LinkedBackend;
  ~EtcdBackend() override;

  std::string workers_host() const override { return m_workers_host; }
  std::uint16_t workers_port() const override { return m_workers_port; }
  std::string role(int node_rank) const override {
    return node_rank == 0 ? " (this node hosts the workers' store)" : "";
  }
  std::string where() const override;
  void before_attempt(int attempt, std::function<void()> go) override;
  void abort_waiting(int signo, std::function<void()> done) override;

 private:
  cluster::LinkChannel channel() const override;
  std::function<bool(int node_rank)> attempt_opener() const override;
  void coordinate() override;
  bool coordinates() const override { return m_coordinator && m_coordinator->elected(); }
  std::optional<std::string> agent_value(const std::string& key) const override;
  void on_node_lost(int node_rank) override;
  void log_start() const override;
  bool opens_attempts() const override { return m_node_rank == 0; }
  bool first_attempt_waits() const override { return true; }
  std::string opened_value() const override;
  void take_opened(const std::string& opened) override;
  bool publishes_membership() const override { return true; }
  int membership_attempt(int next_round) const override;
  void all_final() override;
  void wait_for_finals() override;
  void before_stop() override;

  void on_elected();
  /// The attempt round `round` runs, as the coordinator sees it (the last one opened).
  int running_attempt(int round) const;

  std::unique_ptr<cluster::EtcdCoordinator> m_coordinator;  // the election, and the rounds' keys once elected
  std::string m_workers_host;                               // node rank 0's store for the workers
  std::uint16_t m_workers_port = 0;
};

/// The channel of a node to etcd (LaunchConfig::etcd_settings), under the job's prefix, over
/// http or https (LaunchConfig::etcd_security): its messages name etcd, and a refused
/// certificate, password or permission is a refusal no retry changes.
cluster::LinkChannel etcd_channel(const LaunchConfig& config);

}  // namespace rankrun::launcher::rdzv
