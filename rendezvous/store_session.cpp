// StoreServer's connections once accepted: each request in its turn (the handshake first, then
// the filter on workers' addresses, the limits, the observers, and the key space's state), and
// the connection's end. The filter: while admit_workers_from() names the job's hosts, a worker's
// connection from anywhere else is closed at its first request.

#include <spdlog/spdlog.h>

#include "rendezvous/port_owner.hpp"
#include "rendezvous/store_server_impl.hpp"

namespace rankrun::rendezvous {
namespace {

// 127.0.0.0/8, ::1 and IPv4-mapped loopback: a worker on this machine.
bool is_loopback_ip(const std::string& ip) {
  boost::system::error_code ec;
  const auto address = boost::asio::ip::make_address(ip, ec);
  if (ec) return false;
  if (address.is_v6() && address.to_v6().is_v4_mapped()) {
    return boost::asio::ip::make_address_v4(boost::asio::ip::v4_mapped, address.to_v6()).is_loopback();
  }
  return address.is_loopback();
}

}  // namespace

void StoreServer::Impl::on_connection_request(StoreConnection& connection, const Request& request) {
  if (request.op == Op::Validate) return;
  if (handshake(connection, request)) return;
  if (!admitted(connection, request)) return;
  if (request.op != Op::Ping && connection.key_space() != nullptr && !connection.key_space()->by_client &&
      !identify_as_client(connection)) {
    return;
  }
  if (!m_observers.list.empty()) {
    notify(&connection, [&](StoreObserver& o) {
      o.on_request(connection.id(), request.op,
                   request.keys.empty() ? std::string_view() : std::string_view(request.keys[0]));
    });
    // An observer ended this connection's key space, reset or stopped the server: the key
    // space may be gone, so it is looked at only now.
    if (!connection.is_open()) return;
  }
  KeySpace& space = *connection.key_space();
  m_effects.clear();
  space.state.apply(connection.id(), request, m_effects);
  if (m_effects.close) {
    connection.close(std::string(op_name(request.op)) + ": " + m_effects.error);
    return;
  }
  connection.deliver(m_effects.reply);
  wake(space, m_effects);
}

void StoreServer::Impl::wake(KeySpace& space, const Effects& effects) {
  static constexpr char k_stop_waiting = static_cast<char>(WaitResponse::StopWaiting);
  for (ConnectionId woken : effects.woken) {
    auto it = space.connections.find(woken);
    if (it != space.connections.end()) it->second->deliver(std::string_view(&k_stop_waiting, 1));
  }
}

bool StoreServer::Impl::admitted(StoreConnection& connection, const Request& request) {
  if (!m_workers.nodes || request.op == Op::Ping) return true;
  const KeySpace* space = connection.key_space();
  if (space == nullptr || space->by_client) return true;
  if (m_workers.admitted.count(connection.id()) > 0) return true;
  const auto& ip = connection.peer_ip();
  const auto canonical = canonical_ip(ip);
  // The nodes' addresses in the map, and the addresses their agents reach this store from (a
  // node with several interfaces: its workers come from where its agent does).
  if (is_job_host(canonical)) {
    m_workers.admitted.insert(connection.id());
    return true;
  }
  if (m_workers.refused.first(ip)) {
    spdlog::warn(
        "store: refused a worker connection from {}: not one of the job's hosts (the nodes' addresses and "
        "loopback may reach the workers' store)",
        ip);
  }
  connection.close({});
  return false;
}

bool StoreServer::Impl::is_job_host(const std::string& ip) const {
  return is_loopback_ip(ip) || (m_workers.nodes && m_workers.nodes->count(ip) > 0) || m_workers.agents.count(ip) > 0;
}

void StoreServer::Impl::admit_workers_from(std::optional<std::vector<std::string>> addresses) {
  if (!addresses) {
    m_workers.nodes.reset();
    find_strangers();
    return;
  }
  std::set<std::string> peers;
  for (const auto& a : *addresses) {
    boost::system::error_code ec;
    boost::asio::ip::make_address(a, ec);
    if (ec) {
      // A host name: which addresses its workers come from is not known here; no filter.
      spdlog::debug("store: not filtering workers' addresses: node host '{}' is not an address", a);
      m_workers.nodes.reset();
      find_strangers();
      return;
    }
    peers.insert(canonical_ip(a));
  }
  m_workers.nodes = std::move(peers);
  m_workers.admitted.clear();
  // Who is a stranger may have changed (a node of the last round left, a new one joined).
  find_strangers();
}

void StoreServer::Impl::on_connection_closed(StoreConnection& connection) {
  const ConnectionId id = connection.id();
  m_workers.admitted.erase(id);
  if (const auto it = m_connections.per_peer.find(canonical_ip(connection.peer_ip()));
      it != m_connections.per_peer.end() && --it->second == 0) {
    m_connections.per_peer.erase(it);
  }
  m_handshakes.gates.erase(id);
  m_handshakes.issued.erase(id);
  mark_identified(id);
  if (KeySpace* space = connection.key_space()) {
    if (space->by_client) {
      if (const auto it = m_workers.agents.find(canonical_ip(connection.peer_ip()));
          it != m_workers.agents.end() && --it->second == 0) {
        m_workers.agents.erase(it);
      }
    }
    space->state.disconnect(id);
    space->connections.erase(id);
  }
  --m_connections.open;
  notify(nullptr, [&](StoreObserver& o) { o.on_close(id); });
}

}  // namespace rankrun::rendezvous
