#include "bench/elastic_etcd/coordinator.hpp"

#include <unistd.h>

#include "bench/elastic_etcd/etcd_server.hpp"
#include "bench/on_io.hpp"
#include "launcher/cluster/etcd_rounds.hpp"
#include "launcher/cluster/records.hpp"

namespace rankrun::bench::etcd_bench {

Coordinator::Coordinator(std::uint16_t port, milliseconds node_timeout, const cluster::RoundRules& rules)
    : m_guard(boost::asio::make_work_guard(m_io)), m_node_timeout(node_timeout), m_rules(rules) {
  cluster::EtcdCoordinator::Settings s;
  s.host = k_host;
  s.port = port;
  s.prefix = k_prefix;
  s.node_timeout = node_timeout;
  s.name = "benchmark pid " + std::to_string(::getpid());
  m_etcd = std::make_unique<cluster::EtcdCoordinator>(
      m_io, s,
      cluster::EtcdCoordinator::Hooks{[this] { on_elected(); }, [this](const rdzv::EtcdEvent& e) { on_changed(e); },
                                      [this](const std::string& why) {
                                        m_trace.failed = why;
                                        if (m_rounds) m_rounds->stop();
                                        if (m_leases) m_leases->stop();
                                      }});
  m_io_thread = std::thread([this] { m_io.run(); });
  m_etcd->start();
}

bool Coordinator::wait_elected(milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    if (on_io(m_io, [this] { return m_trace.elected.has_value(); })) return true;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return false;
}

Coordinator::Trace Coordinator::trace() {
  return on_io(m_io, [this] {
    Trace t = m_trace;
    t.map_bytes = 0;
    for (int p = 0;; ++p) {
      const auto page = m_etcd->value(cluster::round_map_key(0, p));
      if (!page) break;
      t.map_bytes += page->size();
    }
    return t;
  });
}

void Coordinator::shutdown() {
  if (!m_io_thread.joinable()) return;
  m_etcd->stop(milliseconds(2000));
  on_io(m_io, [this] {
    if (m_rounds) m_rounds->stop();
    if (m_leases) m_leases->stop();
    return 0;
  });
  m_guard.reset();
  m_io.stop();
  m_io_thread.join();
  m_rounds.reset();
  m_leases.reset();
  m_etcd.reset();
}

void Coordinator::on_elected() {
  m_trace.elected = Clock::now();
  m_leases = std::make_unique<cluster::LeaseWatch>(m_io, m_rules.max_nodes, m_node_timeout,
                                                   cluster::LeaseWatch::Hooks{[this](int node) {
                                                                                ++m_trace.lost;
                                                                                if (m_rounds) m_rounds->lost(node);
                                                                              },
                                                                              nullptr, nullptr});
  m_rounds = std::make_unique<cluster::RoundHost>(
      m_io, *m_etcd, m_rules,
      cluster::RoundHost::Hooks{[this](const std::string& why, int, int) {
                                  if (!m_trace.restart) {
                                    m_trace.restart = Clock::now();
                                    m_trace.restart_why = why;
                                  }
                                },
                                [this](const cluster::RoundRecord& round) {
                                  m_trace.closed = Clock::now();
                                  m_leases->start_round(static_cast<int>(round.members.size()),
                                                        cluster::lease_prefix(round.round));
                                }});
  cluster::take_over(*m_etcd, *m_rounds, *m_leases);
}

void Coordinator::on_changed(const rdzv::EtcdEvent& e) {
  const auto now = Clock::now();
  if (e.key.rfind("join/", 0) == 0) {
    if (e.deleted) {
      ++m_trace.lefts;
    } else {
      ++m_trace.joins;
      if (!m_trace.first_join) m_trace.first_join = now;
      m_trace.last_join = now;
    }
  } else if (e.key.rfind("assign/", 0) == 0 && !e.deleted) {
    ++m_trace.assigns;
    m_trace.last_assign = now;
  } else if (e.deleted && cluster::round_lease_in_key(e.key) && !m_trace.lapsed) {
    m_trace.lapsed = now;
  }
  if (m_rounds && m_leases) cluster::feed(e, *m_rounds, *m_leases);
}

}  // namespace rankrun::bench::etcd_bench
