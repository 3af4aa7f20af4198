// StoreServer's listening socket, its accept loop, and the limits on connections: the store's
// limit (below the descriptor limit), the limit per address, the room kept for rankrun's agents,
// and the strangers closed to make room when the store is full.

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/ip/v6_only.hpp>
#include <boost/asio/post.hpp>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <limits>
#include <spdlog/spdlog.h>

#include "base/host_port.hpp"
#include "rendezvous/port_owner.hpp"
#include "rendezvous/store_server_impl.hpp"

namespace rankrun::rendezvous {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

/// Connections taken per turn of the event loop in a burst, before the open ones are served.
constexpr int k_accept_batch = 64;

std::string endpoint_text(const std::string& host, std::uint16_t port) { return host_port(host, port); }

tcp::endpoint resolve_bind_endpoint(asio::io_context& io, const std::string& host, std::uint16_t port) {
  boost::system::error_code ec;
  auto address = asio::ip::make_address(host, ec);
  if (!ec) return {address, port};
  tcp::resolver resolver(io);
  auto results = resolver.resolve(host, std::to_string(port), tcp::resolver::numeric_service, ec);
  if (ec || results.empty()) {
    throw StoreBindError("cannot listen on " + endpoint_text(host, port) + ": cannot resolve '" + host + "' (" +
                         ec.message() + "); pass a numeric address such as 127.0.0.1");
  }
  return results.begin()->endpoint();
}

std::string port_in_use_message(const std::string& where, std::uint16_t port, const ServerOptions& options) {
  std::string message = "cannot listen on " + where + ": address in use";
  const std::string other = options.any_port_will_do
                                ? "pass " + options.port_flag + "=0"
                                : "give every node another free port (" + options.port_flag + "=...)";
  if (auto owner = find_listener(port)) {
    message += " by pid " + std::to_string(owner->pid);
    if (!owner->command_line.empty()) message += " (" + owner->command_line + ")";
    message += "; " + other + " or stop that process";
  } else {
    message += "; " + other + " or free that port";
  }
  return message;
}

}  // namespace

void StoreServer::Impl::listen() {
  const auto endpoint = resolve_bind_endpoint(m_io, m_options.bind_address, m_options.port);
  const auto where = endpoint_text(endpoint.address().to_string(), m_options.port);
  boost::system::error_code ec;
  m_listener.acceptor.open(endpoint.protocol(), ec);
  if (ec) throw StoreBindError("cannot listen on " + where + ": " + ec.message());
  ::fcntl(m_listener.acceptor.native_handle(), F_SETFD, FD_CLOEXEC);
  // Lets a restarted launcher rebind at once while old connections sit in TIME_WAIT; Linux
  // still refuses a port that another socket is listening on.
  m_listener.acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (endpoint.address().is_v6() && endpoint.address().is_unspecified()) {
    m_listener.acceptor.set_option(asio::ip::v6_only(false), ec);  // "::" means every interface, IPv4 too
  }
  const auto fail = [&](const boost::system::error_code& error) {
    if (error == asio::error::address_in_use) {
      throw StorePortInUse(port_in_use_message(where, m_options.port, m_options));
    }
    std::string message = "cannot listen on " + where + ": " + error.message();
    if (error == asio::error::access_denied && m_options.port != 0 && m_options.port < 1024) {
      message += "; ports below 1024 need privileges: pass " + m_options.port_flag + "=0 or a port of 1024 or more";
    } else if (error == boost::system::errc::address_not_available) {
      message += "; pass an address of this host, or 0.0.0.0 for every interface";
    }
    throw StoreBindError(message);
  };
  m_listener.acceptor.bind(endpoint, ec);
  if (ec) fail(ec);
  // The backlog as deep as the system allows: the kernel cuts any larger value to
  // net.core.somaxconn (asio's max_listen_connections is the compile-time SOMAXCONN, 4096, which
  // a host tuned for large jobs raises past). A burst of clients past it is dropped and retried
  // by TCP 1 s and 3 s later.
  m_listener.acceptor.listen(std::numeric_limits<int>::max(), ec);
  if (ec) fail(ec);
  // Accepted connections inherit TCP_NODELAY (every reply goes out at once); accept4 is called
  // on the listener until it would block.
  m_listener.acceptor.set_option(tcp::no_delay(true), ec);
  m_listener.acceptor.non_blocking(true, ec);
  if (ec) fail(ec);
  const auto bound = m_listener.acceptor.local_endpoint();
  m_listener.port = bound.port();
  m_listener.address = bound.address().to_string();
}

void StoreServer::Impl::do_accept() {
  if (m_stopped) return;
  m_listener.acceptor.async_wait(tcp::acceptor::wait_read,
                                 [self = shared_from_this()](const boost::system::error_code& ec) {
                                   if (self->m_stopped || ec == asio::error::operation_aborted) return;
                                   self->accept_ready();
                                 });
}

void StoreServer::Impl::accept_ready() {
  for (int taken = 0; taken < k_accept_batch; ++taken) {
    if (m_stopped) return;
    sockaddr_storage peer{};
    socklen_t peer_size = sizeof(peer);
    // The peer's address comes with the descriptor, CLOEXEC (workers are spawned from the
    // process hosting this server: they must not inherit it) and TCP_NODELAY (inherited from
    // the listener) are set already: no call per connection beyond accept4.
    const int fd = ::accept4(m_listener.acceptor.native_handle(), reinterpret_cast<sockaddr*>(&peer), &peer_size,
                             SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd >= 0) {
      add_connection(fd, peer, peer_size);
      continue;
    }
    const int error = errno;
    if (error == EAGAIN || error == EWOULDBLOCK) {
      do_accept();  // drained: wait for the next connection
      return;
    }
    if (error == EINTR || error == ECONNABORTED || error == EPROTO) continue;  // that one is gone
    // Out of descriptors (or memory): the pending connection stays in the backlog, so retrying
    // at once would spin. Wait a little instead.
    spdlog::warn("store: accept failed: {}; retrying in 100 ms", std::strerror(error));
    m_listener.retry_timer.expires_after(std::chrono::milliseconds(100));
    m_listener.retry_timer.async_wait([self = shared_from_this()](const boost::system::error_code& timer_ec) {
      if (!timer_ec && !self->m_stopped) self->accept_ready();
    });
    return;
  }
  // A burst: let the connections already open have their turn, then take the next batch.
  asio::post(m_io, [self = shared_from_this()] {
    if (!self->m_stopped) self->accept_ready();
  });
}

void StoreServer::Impl::add_connection(int fd, const sockaddr_storage& peer_address, socklen_t peer_size) {
  tcp::endpoint peer;
  boost::system::error_code ec;
  tcp::socket socket(m_io);
  if (peer_size <= peer.capacity()) {
    std::memcpy(peer.data(), &peer_address, peer_size);
    peer.resize(peer_size);
    socket.assign(peer.protocol(), fd, ec);
  } else {
    ec = asio::error::address_family_not_supported;
  }
  if (ec) {
    ::close(fd);
    return;
  }
  const std::string peer_ip = canonical_ip(peer.address().to_string());
  const std::size_t from_peer = m_connections.per_peer[peer_ip];
  if (m_connections.open >= m_connections.limit && from_peer < m_options.limits.max_connections_per_peer) {
    make_room();
  }
  const bool too_many = m_connections.open >= m_connections.limit;
  if (too_many || from_peer >= m_options.limits.max_connections_per_peer) {
    if (m_connections.refused.first(peer_ip)) {
      spdlog::warn("store: refusing connections from {}: {}", peer_ip,
                   too_many ? std::to_string(m_connections.open) + " connections open (the store's limit)"
                            : std::to_string(from_peer) + " open from that address (the limit per address, " +
                                  m_options.per_address_flag + "; nodes behind NAT share one address: raise it)");
    }
    if (from_peer == 0) m_connections.per_peer.erase(peer_ip);
    socket.close(ec);
    return;
  }
  ++m_connections.per_peer[peer_ip];
  const ConnectionId id = m_listener.next_id++;
  auto connection = std::make_shared<StoreConnection>(std::move(socket), peer, m_listener.port, id, *this,
                                                      m_options.protocol, m_options.limits);
  KeySpace* space = m_spaces.current_default;
  connection->set_key_space(space);
  space->connections.emplace(id, connection);
  ++m_connections.open;
  m_connections.unidentified.insert(id);
  if (is_stranger(peer_ip)) m_connections.strangers.emplace(id, connection);
  notify(connection.get(), [&](StoreObserver& o) {
    o.on_open(id, connection->peer_ip(), connection->peer_port(), connection->local_port());
  });
  // An observer may have ended its key space (closing it) or begun another (it stays).
  notify(connection.get(), [&](StoreObserver& o) {
    const KeySpace& joined = *connection->key_space();
    o.on_join(id, joined.id, joined.name);
  });
  if (connection->is_open()) connection->start();
}

void StoreServer::Impl::make_room() {
  // The oldest stranger that has sent nothing at all; only when every one has, the oldest (a node
  // of the job that this store does not know yet, in its handshake on a loaded host, is spared
  // while silent connections remain).
  auto victim = m_connections.strangers.end();
  for (auto it = m_connections.strangers.begin(); it != m_connections.strangers.end();) {
    const auto connection = it->second.lock();
    if (!connection || !connection->is_open()) {
      it = m_connections.strangers.erase(it);
      continue;
    }
    if (!connection->has_spoken()) {
      victim = it;
      break;
    }
    if (victim == m_connections.strangers.end()) victim = it;
    ++it;
  }
  if (victim == m_connections.strangers.end()) return;
  const auto connection = victim->second.lock();
  m_connections.strangers.erase(victim);
  const std::string& peer = connection->peer_ip();
  if (m_connections.refused.first(peer)) {
    spdlog::warn(
        "store: closed a connection from {} that had not said what it is, to make room ({} connections "
        "open, the store's limit)",
        peer, m_connections.open);
  }
  connection->close({});
}

bool StoreServer::Impl::is_stranger(const std::string& ip) const {
  return (m_workers.nodes || m_connections.agent_reserve > 0) && !is_job_host(ip);
}

void StoreServer::Impl::find_strangers() {
  m_connections.strangers.clear();
  for (const auto& [id, space] : m_spaces.by_id) {
    for (const auto& [cid, connection] : space->connections) {
      if (m_connections.unidentified.count(cid) > 0 && is_stranger(canonical_ip(connection->peer_ip())))
        m_connections.strangers.emplace(cid, connection);
    }
  }
}

void StoreServer::Impl::mark_identified(ConnectionId id) {
  m_connections.unidentified.erase(id);
  m_connections.strangers.erase(id);
}

bool StoreServer::Impl::identify_as_client(StoreConnection& connection) {
  if (m_connections.unidentified.count(connection.id()) == 0) return true;
  mark_identified(connection.id());
  // Those identified as clients, without this one.
  std::size_t agents = 0;
  for (const auto& [peer, open] : m_workers.agents) agents += open;
  const std::size_t clients = m_connections.open - agents - m_connections.unidentified.size() - 1;
  if (m_connections.agent_reserve == 0 || clients + m_connections.agent_reserve < m_connections.limit) return true;
  const std::string& peer = connection.peer_ip();
  if (m_connections.refused.first(peer)) {
    spdlog::warn(
        "store: refusing connections from {}: {} workers' connections open (the store's limit, {} are kept "
        "for rankrun's nodes)",
        peer, clients, m_connections.agent_reserve);
  }
  connection.close({});
  return false;
}

}  // namespace rankrun::rendezvous
