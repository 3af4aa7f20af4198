#include "launcher/cluster/lease_watch.hpp"

#include <algorithm>
#include <boost/asio/post.hpp>

#include "launcher/cluster/records.hpp"

namespace rankrun::launcher::cluster {

LeaseWatch::LeaseWatch(boost::asio::io_context& io, int nnodes, std::chrono::milliseconds node_timeout, Hooks hooks)
    : m_io(io),
      m_nnodes(nnodes),
      m_node_timeout(node_timeout),
      m_hooks(std::move(hooks)),
      m_timer(io),
      m_last_lease(static_cast<std::size_t>(nnodes), Clock::now()) {}

LeaseWatch::~LeaseWatch() { stop(); }

std::vector<double> LeaseWatch::lease_ages() const {
  std::vector<double> out;
  const auto now = Clock::now();
  for (std::size_t i = 0; i < m_last_lease.size(); ++i) {
    out.push_back(static_cast<int>(i) == m_self ? 0.0 : std::chrono::duration<double>(now - m_last_lease[i]).count());
  }
  return out;
}

void LeaseWatch::start() {
  m_started = true;
  // Every node just took part in the rendezvous: its lease runs from now.
  std::fill(m_last_lease.begin(), m_last_lease.end(), Clock::now());
  arm();
}

void LeaseWatch::start_round(int nnodes, std::string lease_prefix) {
  m_nnodes = nnodes;
  m_lease_prefix = std::move(lease_prefix);
  m_last_lease.assign(static_cast<std::size_t>(nnodes), Clock::now());
  m_lost.clear();
  m_final.clear();
  m_done.clear();
  m_all_final_told = false;
  m_stopped = false;
  m_timer.cancel();
  start();
}

void LeaseWatch::stop() {
  m_stopped = true;
  m_timer.cancel();
}

void LeaseWatch::arm() {
  if (m_stopped) return;
  const auto interval = std::clamp(m_node_timeout / 10, std::chrono::milliseconds(50), std::chrono::milliseconds(1000));
  m_next_check = Clock::now() + interval;
  m_timer.expires_after(interval);
  m_timer.async_wait([this](boost::system::error_code ec) {
    if (ec || m_stopped) return;
    check();
    arm();
  });
}

void LeaseWatch::check() {
  const auto now = Clock::now();
  // Due at m_next_check; much later means this thread did not run meanwhile: that time is
  // not the nodes' (a check interval of lateness is tolerated as scheduling noise).
  const auto interval = std::clamp(m_node_timeout / 10, std::chrono::milliseconds(50), std::chrono::milliseconds(1000));
  if (const auto late = now - m_next_check; late > interval) {
    for (auto& t : m_last_lease) t = std::min(now, t + late);
  }
  for (int node = 0; node < m_nnodes; ++node) {
    if (m_lost.count(node) || m_final.count(node) || node == m_self) continue;
    if (!m_external && now - m_last_lease[static_cast<std::size_t>(node)] >= m_node_timeout) {
      m_lost.insert(node);
      if (m_hooks.lost) m_hooks.lost(node);
      if (m_stopped) return;
    }
  }
  check_all_final();
}

void LeaseWatch::lapsed(int node) {
  if (m_stopped || !m_started || node < 0 || node >= m_nnodes || m_lost.count(node) || m_final.count(node)) return;
  m_lost.insert(node);
  if (m_hooks.lost) m_hooks.lost(node);
  check_all_final();
}

void LeaseWatch::check_all_final() {
  if (m_all_final_told || m_stopped) return;
  for (int node = 0; node < m_nnodes; ++node) {
    if (!m_lost.count(node) && !m_final.count(node)) return;
  }
  m_all_final_told = true;
  if (m_hooks.all_final) m_hooks.all_final();
}

void LeaseWatch::on_join(std::uint64_t conn, rendezvous::KeySpaceId, std::string_view name) {
  if (name == k_agents_key_space) {
    m_agents.insert(conn);
  } else {
    m_agents.erase(conn);
  }
}

void LeaseWatch::on_close(std::uint64_t conn) { m_agents.erase(conn); }

void LeaseWatch::on_request(std::uint64_t conn, rendezvous::Op op, std::string_view key) {
  if (m_stopped || op != rendezvous::Op::Set || !m_agents.count(conn)) return;
  if (const auto node = node_in_key(key, m_lease_prefix); node && *node < m_nnodes) {
    m_last_lease[static_cast<std::size_t>(*node)] = Clock::now();
    return;
  }
  // The hooks read the value, which the server applies after this call: post them.
  if (const auto node = node_in_key(key, "final/"); node && *node < m_nnodes) {
    m_final.insert(*node);
    boost::asio::post(m_io, [this] { check_all_final(); });
    return;
  }
  if (const auto done = done_in_key(key); done && done->second < m_nnodes) {
    auto& nodes = m_done[done->first];
    nodes.insert(done->second);
    if (static_cast<int>(nodes.size()) == m_nnodes) {
      boost::asio::post(m_io, [this, attempt = done->first] {
        if (!m_stopped && m_hooks.all_done) m_hooks.all_done(attempt);
      });
    }
  }
}

}  // namespace rankrun::launcher::cluster
