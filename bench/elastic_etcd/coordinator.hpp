#pragma once
// The coordinator as an elected rankrun runs it, on one io thread of its own.

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "bench/bench_util.hpp"
#include "launcher/cluster/etcd_coordinator.hpp"
#include "launcher/cluster/lease_watch.hpp"
#include "launcher/cluster/round_host.hpp"
#include "launcher/cluster/rounds.hpp"
#include "rendezvous/etcd_client.hpp"

namespace rankrun::bench::etcd_bench {

namespace rdzv = ::rankrun::rendezvous;
namespace cluster = ::rankrun::launcher::cluster;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// The elected rankrun's share, as Job::start_coordinator, on_elected (coordinate + take_over) and
// on_etcd_change (feed) wire it, with timestamps of what its watch shows.
class Coordinator {
 public:
  struct Trace {
    std::optional<Clock::time_point> elected, first_join, last_join, closed, last_assign, lapsed, restart;
    int joins = 0, lefts = 0, assigns = 0, lost = 0;
    std::string restart_why, failed;
    std::size_t map_bytes = 0;
  };

  Coordinator(std::uint16_t port, milliseconds node_timeout, const cluster::RoundRules& rules);
  ~Coordinator() { shutdown(); }
  Coordinator(const Coordinator&) = delete;
  Coordinator& operator=(const Coordinator&) = delete;

  bool wait_elected(milliseconds timeout);

  Trace trace();

  double io_cpu_s() { return thread_cpu_s(m_io_thread); }

  void shutdown();

 private:
  void on_elected();
  void on_changed(const rdzv::EtcdEvent& e);

  boost::asio::io_context m_io;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> m_guard;
  milliseconds m_node_timeout;
  cluster::RoundRules m_rules;
  std::unique_ptr<cluster::EtcdCoordinator> m_etcd;
  std::unique_ptr<cluster::LeaseWatch> m_leases;
  std::unique_ptr<cluster::RoundHost> m_rounds;
  Trace m_trace;  // io thread
  std::thread m_io_thread;
};

}  // namespace rankrun::bench::etcd_bench
