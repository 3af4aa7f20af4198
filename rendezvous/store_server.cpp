#include "rendezvous/store_server.hpp"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <set>
#include <utility>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ip/v6_only.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <map>
#include <spdlog/spdlog.h>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "rendezvous/port_owner.hpp"
#include "rendezvous/store_connection.hpp"
#include "rendezvous/host_port.hpp"

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

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

/// Connections taken per turn of the event loop in a burst, before the open ones are served.
constexpr int k_accept_batch = 64;

// One key space: its StoreState and the connections that belong to it. Connections point at
// their KeySpace (StoreConnection::key_space()), so serving a request needs no lookup.
struct KeySpace {
  KeySpace(KeySpaceId space_id, std::string space_name, const Limits& limits, bool made_by_client, MemoryBudget* budget)
      : id(space_id), name(std::move(space_name)), state(limits, budget), by_client(made_by_client) {}

  KeySpaceId id;
  std::string name;
  StoreState state;
  /// Created by a client's SET of k_key_space_key (counts against max_client_key_spaces).
  bool by_client;
  std::unordered_map<ConnectionId, std::shared_ptr<StoreConnection>> connections;
};

class StoreServer::Impl : public std::enable_shared_from_this<Impl>, public ConnectionHost {
 public:
  Impl(asio::io_context& io, ServerOptions options)
      : m_io(io), m_options(std::move(options)), m_acceptor(io), m_retry_timer(io) {
    m_budget.limit = m_options.memory_quota;
    // Descriptors are kept in reserve for everything else the process opens (its logs, its
    // workers' pipes, its own connections to other nodes): a flood of connections reaches the
    // connection limit before the descriptor limit.
    m_connection_limit = m_options.limits.max_connections;
    rlimit nofile{};
    if (::getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur != RLIM_INFINITY) {
      constexpr rlim_t k_reserve = 256;
      const rlim_t usable = nofile.rlim_cur > 2 * k_reserve ? nofile.rlim_cur - k_reserve : nofile.rlim_cur / 2;
      m_connection_limit = std::min<std::size_t>(m_connection_limit, static_cast<std::size_t>(usable));
    }
    m_agent_reserve = std::min(m_options.agent_reserve, m_connection_limit / 2);
    m_default = create_key_space("default", false);
  }

  void listen();
  /// Waits until a connection is pending, then accept_ready().
  void do_accept();
  /// Takes every pending connection, k_accept_batch at a time between the other handlers.
  void accept_ready();
  /// Admits the accepted `fd` (or closes it for a limit).
  void take(int fd, const sockaddr_storage& peer, socklen_t peer_size);
  void reset();
  void stop();

  KeySpaceId begin_key_space(std::string name);
  void end_key_space(KeySpaceId id);
  const KeySpace& key_space(KeySpaceId id) const;
  KeySpace& key_space(KeySpaceId id) { return const_cast<KeySpace&>(std::as_const(*this).key_space(id)); }
  void add_observer(StoreObserver* observer);
  void remove_observer(StoreObserver* observer);

  void on_connection_request(StoreConnection& connection, const Request& request) override;
  bool admitted(StoreConnection& connection, const Request& request);
  /// The store is full: closes the oldest stranger's connection that has not said what it is,
  /// if any.
  void make_room();
  /// Whether workers may come from `ip` (canonical), while admit_workers_from() filters:
  /// loopback, a node's address, or an agent's source address.
  bool is_job_host(const std::string& ip) const;
  /// Whether a silent connection from `ip` may be closed to make room: not from a job host,
  /// while the workers are filtered or (before the nodes are known) agents are expected.
  bool is_stranger(const std::string& ip) const;
  /// m_strangers anew, after the job's hosts changed.
  void find_strangers();
  /// `connection` said what it is (or closed): no longer a candidate for make_room().
  void settled(ConnectionId id);
  /// `connection`'s first request past the handshake: it is a worker's (or a plain client's).
  /// False, having closed it, when those already hold all but the agents' reserve.
  bool settle_as_client(StoreConnection& connection);
  /// Whether a limit's refusal of `peer` is to be logged: once per address, and for at most
  /// 4096 addresses (a flood from that many would fill the disk otherwise).
  bool log_limit_once(const std::string& peer);
  void on_connection_closed(StoreConnection& connection) override;

  asio::io_context& m_io;
  ServerOptions m_options;
  MemoryBudget m_budget;                                // before the key spaces: they give their bytes back as they go
  std::optional<std::set<std::string>> m_worker_peers;  // admit_workers_from(), canonical
  std::set<std::string> m_refused_workers;              // logged once each
  std::unordered_set<ConnectionId> m_admitted;          // workers' connections already checked
  std::unordered_map<std::string, std::size_t> m_per_peer;  // open connections by address
  std::set<std::string> m_limit_logged;                     // addresses refused for a limit, logged once
  std::size_t m_connection_limit = 0;                       // Limits::max_connections, below the fd limit
  std::size_t m_agent_reserve = 0;                          // ServerOptions::agent_reserve, at most half the limit
  /// The addresses (canonical) of connections in key spaces that clients named, and how many
  /// each has open.
  std::unordered_map<std::string, std::size_t> m_agent_peers;
  /// Connections that have not said yet what they are (no request past VALIDATE and PING, or a
  /// handshake under way).
  std::unordered_set<ConnectionId> m_unsettled;
  /// Those of them from addresses outside the job's hosts (while admit_workers_from() filters),
  /// oldest first: closed to make room when the store is full. Idle connections of the job's
  /// own (torch 1.13's second connection never speaks) are never among them.
  std::map<ConnectionId, std::weak_ptr<StoreConnection>> m_strangers;
  tcp::acceptor m_acceptor;
  asio::steady_timer m_retry_timer;
  Effects m_effects;
  /// Every key space by id (ordered, for key_spaces()), and by name.
  std::map<KeySpaceId, std::unique_ptr<KeySpace>> m_spaces;
  std::map<std::string, KeySpace*, std::less<>> m_by_name;
  KeySpace* m_default = nullptr;
  KeySpaceId m_next_space = 0;
  std::size_t m_client_spaces = 0;
  std::size_t m_connection_count = 0;
  ConnectionId m_next_id = 1;
  std::uint16_t m_port = 0;
  std::string m_address;
  bool m_stopped = false;
  /// Removal during a notification leaves a null slot, swept when the outermost one ends.
  std::vector<StoreObserver*> m_observers;
  int m_notifying = 0;
  bool m_observers_dirty = false;
  /// Connections that were sent a challenge and owe their proof.
  std::unordered_map<ConnectionId, KeySpaceGate> m_gates;
  /// Connections that were given a credential.
  std::unordered_set<ConnectionId> m_issued;
  /// Peer addresses whose refusal was logged (each once), up to k_max_logged_peers.
  std::unordered_set<std::string> m_refused_peers;

 private:
  KeySpace* create_key_space(std::string name, bool by_client);
  /// Moves `connection` into the key space `name`; empty on success, else why not (nothing
  /// changed). `refusal`: set when the reason is worth the once-per-peer log.
  std::string choose_key_space(StoreConnection& connection, std::string_view name, std::string* refusal = nullptr);
  /// The key-space handshake (key_space_auth.hpp); true when `request` was part of it.
  bool handshake(StoreConnection& connection, const Request& request);
  /// Sends the handshake's `step` (joining `name` when it admits the connection).
  void conclude(StoreConnection& connection, std::string_view name, const KeySpaceGate::Step& step);
  /// A fresh credential that carries the job secret (ServerOptions::issue_credential), once per
  /// connection.
  void issue_credential(StoreConnection& connection);
  /// Logs `why` with the peer's address, once per address.
  void log_refusal(const StoreConnection& connection, std::string_view why);
  void close_all();
  // Calls `call(observer)` on each observer present when it starts; stops early once `connection`
  // (when given) is closed by one of them.
  template <typename F>
  void notify(const StoreConnection* connection, F call);
};

namespace {

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

// A client-sent name for a log line: printable, bounded.
std::string quoted_name(std::string_view name) {
  constexpr std::size_t k_max = 64;
  std::string out = "'";
  for (char c : name.substr(0, k_max)) out.push_back(c >= 0x20 && c < 0x7F ? c : '?');
  out += name.size() > k_max ? "'... (" + std::to_string(name.size()) + " bytes)" : "'";
  return out;
}

// Counts notifications in progress, also when an observer throws.
class NotifyScope {
 public:
  explicit NotifyScope(int& depth) : m_depth(depth) { ++m_depth; }
  ~NotifyScope() { --m_depth; }
  NotifyScope(const NotifyScope&) = delete;
  NotifyScope& operator=(const NotifyScope&) = delete;

 private:
  int& m_depth;
};

}  // namespace

template <typename F>
void StoreServer::Impl::notify(const StoreConnection* connection, F call) {
  if (m_observers.empty()) return;
  {
    NotifyScope scope(m_notifying);
    const std::size_t count = m_observers.size();  // those added meanwhile hear the next event
    for (std::size_t i = 0; i < count; ++i) {
      if (connection != nullptr && !connection->is_open()) break;
      if (StoreObserver* observer = m_observers[i]) call(*observer);
    }
  }
  if (m_notifying == 0 && m_observers_dirty) {
    m_observers.erase(std::remove(m_observers.begin(), m_observers.end(), nullptr), m_observers.end());
    m_observers_dirty = false;
  }
}

void StoreServer::Impl::listen() {
  const auto endpoint = resolve_bind_endpoint(m_io, m_options.bind_address, m_options.port);
  const auto where = endpoint_text(endpoint.address().to_string(), m_options.port);
  boost::system::error_code ec;
  m_acceptor.open(endpoint.protocol(), ec);
  if (ec) throw StoreBindError("cannot listen on " + where + ": " + ec.message());
  ::fcntl(m_acceptor.native_handle(), F_SETFD, FD_CLOEXEC);
  // Lets a restarted launcher rebind at once while old connections sit in TIME_WAIT; Linux
  // still refuses a port that another socket is listening on.
  m_acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (endpoint.address().is_v6() && endpoint.address().is_unspecified()) {
    m_acceptor.set_option(asio::ip::v6_only(false), ec);  // "::" means every interface, IPv4 too
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
  m_acceptor.bind(endpoint, ec);
  if (ec) fail(ec);
  // The backlog as deep as the system allows: the kernel cuts any larger value to
  // net.core.somaxconn (asio's max_listen_connections is the compile-time SOMAXCONN, 4096, which
  // a host tuned for large jobs raises past). A burst of clients past it is dropped and retried
  // by TCP 1 s and 3 s later.
  m_acceptor.listen(std::numeric_limits<int>::max(), ec);
  if (ec) fail(ec);
  // Accepted connections inherit TCP_NODELAY (every reply goes out at once); accept4 is called
  // on the listener until it would block.
  m_acceptor.set_option(tcp::no_delay(true), ec);
  m_acceptor.non_blocking(true, ec);
  if (ec) fail(ec);
  const auto bound = m_acceptor.local_endpoint();
  m_port = bound.port();
  m_address = bound.address().to_string();
}

void StoreServer::Impl::do_accept() {
  if (m_stopped) return;
  m_acceptor.async_wait(tcp::acceptor::wait_read, [self = shared_from_this()](const boost::system::error_code& ec) {
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
    const int fd = ::accept4(m_acceptor.native_handle(), reinterpret_cast<sockaddr*>(&peer), &peer_size,
                             SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd >= 0) {
      take(fd, peer, peer_size);
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
    m_retry_timer.expires_after(std::chrono::milliseconds(100));
    m_retry_timer.async_wait([self = shared_from_this()](const boost::system::error_code& timer_ec) {
      if (!timer_ec && !self->m_stopped) self->accept_ready();
    });
    return;
  }
  // A burst: let the connections already open have their turn, then take the next batch.
  asio::post(m_io, [self = shared_from_this()] {
    if (!self->m_stopped) self->accept_ready();
  });
}

void StoreServer::Impl::take(int fd, const sockaddr_storage& peer_address, socklen_t peer_size) {
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
  const std::size_t from_peer = m_per_peer[peer_ip];
  if (m_connection_count >= m_connection_limit && from_peer < m_options.limits.max_connections_per_peer) {
    make_room();
  }
  const bool too_many = m_connection_count >= m_connection_limit;
  if (too_many || from_peer >= m_options.limits.max_connections_per_peer) {
    if (log_limit_once(peer_ip)) {
      spdlog::warn("store: refusing connections from {}: {}", peer_ip,
                   too_many ? std::to_string(m_connection_count) + " connections open (the store's limit)"
                            : std::to_string(from_peer) + " open from that address (the limit per address, " +
                                  m_options.per_address_flag + "; nodes behind NAT share one address: raise it)");
    }
    if (from_peer == 0) m_per_peer.erase(peer_ip);
    socket.close(ec);
    return;
  }
  ++m_per_peer[peer_ip];
  const ConnectionId id = m_next_id++;
  auto connection = std::make_shared<StoreConnection>(std::move(socket), peer, m_port, id, *this, m_options.protocol,
                                                      m_options.limits);
  KeySpace* space = m_default;
  connection->set_key_space(space);
  space->connections.emplace(id, connection);
  ++m_connection_count;
  m_unsettled.insert(id);
  if (is_stranger(peer_ip)) m_strangers.emplace(id, connection);
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

void StoreServer::Impl::add_observer(StoreObserver* observer) {
  if (observer == nullptr) return;
  if (std::find(m_observers.begin(), m_observers.end(), observer) != m_observers.end()) return;
  m_observers.push_back(observer);
}

void StoreServer::Impl::remove_observer(StoreObserver* observer) {
  auto it = std::find(m_observers.begin(), m_observers.end(), observer);
  if (it == m_observers.end() || observer == nullptr) return;
  if (m_notifying > 0) {
    *it = nullptr;  // a notification is walking the vector by index
    m_observers_dirty = true;
  } else {
    m_observers.erase(it);
  }
}

KeySpace* StoreServer::Impl::create_key_space(std::string name, bool by_client) {
  const auto& unmetered = m_options.unmetered_key_spaces;
  MemoryBudget* budget = std::find(unmetered.begin(), unmetered.end(), name) == unmetered.end() ? &m_budget : nullptr;
  auto space = std::make_unique<KeySpace>(m_next_space++, std::move(name), m_options.limits, by_client, budget);
  KeySpace* raw = space.get();
  m_by_name.emplace(raw->name, raw);
  m_spaces.emplace(raw->id, std::move(space));
  if (by_client) ++m_client_spaces;
  return raw;
}

KeySpaceId StoreServer::Impl::begin_key_space(std::string name) {
  if (!is_valid_key_space_name(name)) {
    throw std::invalid_argument("key space name " + quoted_name(name) + " is not 1 to " +
                                std::to_string(k_max_key_space_name) + " printable ASCII characters without blanks");
  }
  if (m_by_name.find(name) != m_by_name.end()) {
    throw std::invalid_argument("key space " + quoted_name(name) + " already exists");
  }
  m_default = create_key_space(std::move(name), false);
  spdlog::debug("store: key space {} '{}' begun; new connections join it", m_default->id, m_default->name);
  return m_default->id;
}

void StoreServer::Impl::end_key_space(KeySpaceId id) {
  auto it = m_spaces.find(id);
  if (it == m_spaces.end()) return;
  // Detached first, so that callbacks made while its connections close find it gone (ending it
  // again is a no-op, and nothing can join it); it is destroyed when this function returns.
  std::unique_ptr<KeySpace> space = std::move(it->second);
  m_spaces.erase(it);
  m_by_name.erase(space->name);
  if (space->by_client) --m_client_spaces;
  if (m_default == space.get()) m_default = create_key_space(space->name, false);
  spdlog::debug("store: key space {} '{}' ended: {} keys dropped, {} connections closed", space->id, space->name,
                space->state.num_keys(), space->connections.size());
  // Closing calls back into on_connection_closed, which erases from the map: walk a copy.
  std::vector<std::shared_ptr<StoreConnection>> closing;
  closing.reserve(space->connections.size());
  for (auto& [conn, connection] : space->connections) closing.push_back(connection);
  for (auto& connection : closing) connection->close({});
}

const KeySpace& StoreServer::Impl::key_space(KeySpaceId id) const {
  auto it = m_spaces.find(id);
  if (it == m_spaces.end()) throw std::out_of_range("the store has no key space " + std::to_string(id));
  return *it->second;
}

std::string StoreServer::Impl::choose_key_space(StoreConnection& connection, std::string_view name,
                                                std::string* refusal) {
  if (!is_valid_key_space_name(name)) {
    return "key space name " + quoted_name(name) + " is not 1 to " + std::to_string(k_max_key_space_name) +
           " printable ASCII characters without blanks";
  }
  KeySpace* target = nullptr;
  if (auto found = m_by_name.find(name); found != m_by_name.end()) {
    target = found->second;
    if (!target->by_client) {
      // The workers' key spaces (and the first default) are reached as the default of a new
      // connection, never by name: an outsider who guessed "attempt_0" would read them.
      std::string why = "asked for key space " + quoted_name(name) + " by name, which only new connections join";
      if (refusal) *refusal = why;
      return why;
    }
  } else if (m_options.max_client_key_spaces == 0) {
    // A store for workers alone (unmodified torch clients, which name no key space).
    std::string why = "asked for key space " + quoted_name(name) + " by name, and this store serves its workers only";
    if (refusal) *refusal = why;
    return why;
  } else if (m_client_spaces >= m_options.max_client_key_spaces) {
    return "cannot create key space " + quoted_name(name) + ": " + std::to_string(m_client_spaces) +
           " key spaces made by clients exist (the limit)";
  } else {
    target = create_key_space(std::string(name), true);
    spdlog::debug("store: key space {} '{}' created by connection {}", target->id, target->name, connection.id());
  }
  KeySpace* from = connection.key_space();
  if (target == from) return {};
  // Nothing to carry over: this is the connection's first request that touches keys.
  auto node = from->connections.extract(connection.id());
  from->state.disconnect(connection.id());
  target->connections.insert(std::move(node));
  connection.set_key_space(target);
  if (target->by_client && !from->by_client) ++m_agent_peers[canonical_ip(connection.peer_ip())];
  settled(connection.id());
  notify(&connection, [&](StoreObserver& o) { o.on_join(connection.id(), target->id, target->name); });
  return {};
}

void StoreServer::Impl::log_refusal(const StoreConnection& connection, std::string_view why) {
  // Once per address: a peer that keeps trying fills no disk. Past the bound, the rest go
  // unlogged (the bound is reached only by a flood from that many addresses).
  constexpr std::size_t k_max_logged_peers = 4096;
  const std::string& peer = connection.peer_ip();
  if (m_refused_peers.count(peer) != 0 || m_refused_peers.size() >= k_max_logged_peers) return;
  m_refused_peers.insert(peer);
  spdlog::warn("store: refused an agent connection from {}: {}", peer, why);
}

namespace {
// A COMPARE_SET's reply: the value, length first.
std::string value_reply(std::string_view value) {
  std::string out;
  append_bytes(out, value);
  return out;
}
bool is_handshake_key(const Request& request) {
  return (request.op == Op::Set || request.op == Op::CompareSet) && !request.keys.empty() &&
         (request.keys[0] == k_key_space_key || request.keys[0] == k_key_space_proof_key);
}
}  // namespace

void StoreServer::Impl::issue_credential(StoreConnection& connection) {
  if (!m_options.issue_credential) {
    log_refusal(connection, k_refusal_no_credential);
    connection.finish(value_reply(reply_refused(k_refusal_no_credential)));
    return;
  }
  if (!m_issued.insert(connection.id()).second) {
    log_refusal(connection, "it asked for a second credential on one connection");
    connection.close({});
    return;
  }
  std::string credential;
  try {
    credential = m_options.issue_credential();
  } catch (const std::exception& e) {
    spdlog::error("store: cannot hand out the job secret to {}: {}", connection.peer_ip(), e.what());
    connection.finish(
        value_reply(reply_refused("the store host could not make a credential: " + std::string(e.what()))));
    return;
  }
  connection.deliver(value_reply(reply_credential(credential)));
}

void StoreServer::Impl::conclude(StoreConnection& connection, std::string_view name, const KeySpaceGate::Step& step) {
  if (step.admit) {
    std::string refusal;
    const std::string error = choose_key_space(connection, name, &refusal);
    if (error.empty()) {
      connection.deliver(value_reply(step.reply));
      return;
    }
    if (!refusal.empty()) {
      log_refusal(connection, refusal);
    } else {
      spdlog::warn("store: closing connection {} from {}:{}: {}", connection.id(), connection.peer_ip(),
                   connection.peer_port(), error);
    }
    connection.finish(value_reply(reply_refused(error)));
    return;
  }
  if (!step.refusal.empty()) log_refusal(connection, step.refusal);
  connection.finish(value_reply(step.reply));
}

bool StoreServer::Impl::handshake(StoreConnection& connection, const Request& request) {
  const JobSecret* secret = m_options.job_secret.get();
  if (auto gate = m_gates.find(connection.id()); gate != m_gates.end()) {
    // A challenge is out: the proof, and nothing else, comes next.
    KeySpaceGate pending = std::move(gate->second);
    m_gates.erase(gate);
    if (request.op == Op::CompareSet && request.keys[0] == k_key_space_proof_key) {
      conclude(connection, pending.name(), pending.proof(request.values[0], request.values[1], secret));
    } else {
      log_refusal(connection,
                  "it sent " + std::string(op_name(request.op)) + " instead of its proof of the job secret");
      connection.close({});
    }
    return true;
  }
  if (!connection.may_choose_key_space()) {
    if (!is_handshake_key(request)) return false;
    connection.close(std::string(op_name(request.op)) + " of '" + request.keys[0] +
                     "' chooses a key space and must be the connection's first request");
    return true;
  }
  if (request.op == Op::Ping) return false;  // may come first
  if (request.op == Op::CompareSet && request.keys[0] == k_key_space_key) {
    KeySpaceGate gate;
    const auto step = gate.hello(request.values[0], request.values[1], secret);
    if (step.issue_credential) {
      issue_credential(connection);  // the connection's HELLO is still to come
      return true;
    }
    connection.stop_choosing_key_space();
    if (gate.awaiting_proof()) {
      connection.deliver(value_reply(step.reply));
      m_gates.emplace(connection.id(), std::move(gate));
    } else {
      conclude(connection, request.values[0], step);
    }
    return true;
  }
  connection.stop_choosing_key_space();
  if (!is_handshake_key(request)) return false;
  const std::string_view key = request.keys[0];
  if (request.op == Op::Set && key == k_key_space_key) {
    // The plain choice, without a proof: a store with a secret refuses it.
    if (secret != nullptr) {
      log_refusal(connection, "no job secret (it chose key space " + quoted_name(request.values[0]) +
                                  " without the handshake's proof)");
      connection.close({});
      return true;
    }
    std::string refusal;
    if (auto error = choose_key_space(connection, request.values[0], &refusal); !error.empty()) {
      if (!refusal.empty()) {
        log_refusal(connection, refusal);
        connection.close({});
      } else {
        connection.close("SET of '" + std::string(k_key_space_key) + "': " + error);
      }
    }
    return true;
  }
  connection.close(std::string(op_name(request.op)) + " of '" + std::string(key) +
                   "' without the key-space handshake before it");
  return true;
}

bool StoreServer::Impl::admitted(StoreConnection& connection, const Request& request) {
  if (!m_worker_peers || request.op == Op::Ping) return true;
  const KeySpace* space = connection.key_space();
  if (space == nullptr || space->by_client) return true;
  if (m_admitted.count(connection.id()) > 0) return true;
  const auto& ip = connection.peer_ip();
  const auto canonical = canonical_ip(ip);
  // The nodes' addresses in the map, and the addresses their agents reach this store from (a
  // node with several interfaces: its workers come from where its agent does).
  if (is_job_host(canonical)) {
    m_admitted.insert(connection.id());
    return true;
  }
  if (m_refused_workers.size() < 4096 && m_refused_workers.insert(ip).second) {
    spdlog::warn(
        "store: refused a worker connection from {}: not one of the job's hosts (the nodes' addresses and "
        "loopback may reach the workers' store)",
        ip);
  }
  connection.close({});
  return false;
}

bool StoreServer::Impl::is_job_host(const std::string& ip) const {
  return is_loopback_ip(ip) || (m_worker_peers && m_worker_peers->count(ip) > 0) || m_agent_peers.count(ip) > 0;
}

bool StoreServer::Impl::is_stranger(const std::string& ip) const {
  return (m_worker_peers || m_agent_reserve > 0) && !is_job_host(ip);
}

void StoreServer::Impl::find_strangers() {
  m_strangers.clear();
  for (const auto& [id, space] : m_spaces) {
    for (const auto& [cid, connection] : space->connections) {
      if (m_unsettled.count(cid) > 0 && is_stranger(canonical_ip(connection->peer_ip())))
        m_strangers.emplace(cid, connection);
    }
  }
}

void StoreServer::Impl::settled(ConnectionId id) {
  m_unsettled.erase(id);
  m_strangers.erase(id);
}

void StoreServer::Impl::make_room() {
  while (!m_strangers.empty()) {
    auto oldest = m_strangers.begin();
    const auto connection = oldest->second.lock();
    m_strangers.erase(oldest);
    if (!connection || !connection->is_open()) continue;
    const std::string& peer = connection->peer_ip();
    if (log_limit_once(peer)) {
      spdlog::warn(
          "store: closed a connection from {} that had not said what it is, to make room ({} connections "
          "open, the store's limit)",
          peer, m_connection_count);
    }
    connection->close({});
    return;
  }
}

bool StoreServer::Impl::log_limit_once(const std::string& peer) {
  return m_limit_logged.size() < 4096 && m_limit_logged.insert(peer).second;
}

bool StoreServer::Impl::settle_as_client(StoreConnection& connection) {
  if (m_unsettled.count(connection.id()) == 0) return true;
  settled(connection.id());
  // Those settled as clients, without this one.
  std::size_t agents = 0;
  for (const auto& [peer, open] : m_agent_peers) agents += open;
  const std::size_t clients = m_connection_count - agents - m_unsettled.size() - 1;
  if (m_agent_reserve == 0 || clients + m_agent_reserve < m_connection_limit) return true;
  const std::string& peer = connection.peer_ip();
  if (log_limit_once(peer)) {
    spdlog::warn(
        "store: refusing connections from {}: {} workers' connections open (the store's limit, {} are kept "
        "for rankrun's nodes)",
        peer, clients, m_agent_reserve);
  }
  connection.close({});
  return false;
}

void StoreServer::Impl::on_connection_request(StoreConnection& connection, const Request& request) {
  if (request.op == Op::Validate) return;
  if (handshake(connection, request)) return;
  if (!admitted(connection, request)) return;
  if (request.op != Op::Ping && connection.key_space() != nullptr && !connection.key_space()->by_client &&
      !settle_as_client(connection)) {
    return;
  }
  if (!m_observers.empty()) {
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
  static constexpr char k_stop_waiting = static_cast<char>(WaitResponse::StopWaiting);
  for (ConnectionId woken : m_effects.woken) {
    auto it = space.connections.find(woken);
    if (it != space.connections.end()) it->second->deliver(std::string_view(&k_stop_waiting, 1));
  }
}

void StoreServer::Impl::on_connection_closed(StoreConnection& connection) {
  const ConnectionId id = connection.id();
  m_admitted.erase(id);
  if (const auto it = m_per_peer.find(canonical_ip(connection.peer_ip()));
      it != m_per_peer.end() && --it->second == 0) {
    m_per_peer.erase(it);
  }
  m_gates.erase(id);
  m_issued.erase(id);
  settled(id);
  if (KeySpace* space = connection.key_space()) {
    if (space->by_client) {
      if (const auto it = m_agent_peers.find(canonical_ip(connection.peer_ip()));
          it != m_agent_peers.end() && --it->second == 0) {
        m_agent_peers.erase(it);
      }
    }
    space->state.disconnect(id);
    space->connections.erase(id);
  }
  --m_connection_count;
  notify(nullptr, [&](StoreObserver& o) { o.on_close(id); });
}

void StoreServer::Impl::close_all() {
  // Closing calls back into on_connection_closed, which erases from the maps: walk a copy.
  std::vector<std::shared_ptr<StoreConnection>> all;
  all.reserve(m_connection_count);
  for (auto& [id, space] : m_spaces) {
    for (auto& [conn, connection] : space->connections) all.push_back(connection);
  }
  for (auto& connection : all) connection->close({});
}

void StoreServer::Impl::reset() {
  std::vector<KeySpaceId> ids;
  for (auto& [id, space] : m_spaces) ids.push_back(id);
  // Ending the default begins a fresh one with its name, which is not in `ids`.
  for (KeySpaceId id : ids) end_key_space(id);
}

void StoreServer::Impl::stop() {
  if (m_stopped) return;
  m_stopped = true;
  boost::system::error_code ec;
  m_acceptor.close(ec);
  m_retry_timer.cancel();
  close_all();
}

StoreServer::StoreServer(asio::io_context& io, ServerOptions options, StoreObserver* observer)
    : m_impl(std::make_shared<Impl>(io, std::move(options))) {
  m_impl->add_observer(observer);
  m_impl->listen();
  m_impl->do_accept();
}

StoreServer::~StoreServer() {
  // The observers may already be half torn down by their owners: no callbacks from here on.
  m_impl->m_observers.clear();
  m_impl->stop();
}

std::uint16_t StoreServer::port() const { return m_impl->m_port; }
const std::string& StoreServer::address() const { return m_impl->m_address; }

StoreServer::KeySpaceId StoreServer::begin_key_space(std::string name) {
  return m_impl->begin_key_space(std::move(name));
}
void StoreServer::end_key_space(KeySpaceId space) { m_impl->end_key_space(space); }
StoreServer::KeySpaceId StoreServer::default_key_space() const { return m_impl->m_default->id; }

std::optional<StoreServer::KeySpaceId> StoreServer::find_key_space(std::string_view name) const {
  auto it = m_impl->m_by_name.find(name);
  if (it == m_impl->m_by_name.end()) return std::nullopt;
  return it->second->id;
}

const std::string& StoreServer::key_space_name(KeySpaceId space) const { return m_impl->key_space(space).name; }

std::vector<StoreServer::KeySpaceId> StoreServer::key_spaces() const {
  std::vector<KeySpaceId> ids;
  ids.reserve(m_impl->m_spaces.size());
  for (const auto& [id, space] : m_impl->m_spaces) ids.push_back(id);
  return ids;
}

void StoreServer::add_observer(StoreObserver* observer) { m_impl->add_observer(observer); }
void StoreServer::remove_observer(StoreObserver* observer) { m_impl->remove_observer(observer); }
void StoreServer::reset() { m_impl->reset(); }
void StoreServer::stop() { m_impl->stop(); }
void StoreServer::admit_workers_from(std::optional<std::vector<std::string>> addresses) {
  if (!addresses) {
    m_impl->m_worker_peers.reset();
    m_impl->find_strangers();
    return;
  }
  std::set<std::string> peers;
  for (const auto& a : *addresses) {
    boost::system::error_code ec;
    boost::asio::ip::make_address(a, ec);
    if (ec) {
      // A host name: which addresses its workers come from is not known here; no filter.
      spdlog::debug("store: not filtering workers' addresses: node host '{}' is not an address", a);
      m_impl->m_worker_peers.reset();
      m_impl->find_strangers();
      return;
    }
    peers.insert(canonical_ip(a));
  }
  m_impl->m_worker_peers = std::move(peers);
  m_impl->m_admitted.clear();
  // Who is a stranger may have changed (a node of the last round left, a new one joined).
  m_impl->find_strangers();
}

std::size_t StoreServer::connection_count() const { return m_impl->m_connection_count; }

std::size_t StoreServer::connection_count(KeySpaceId space) const {
  auto it = m_impl->m_spaces.find(space);
  return it == m_impl->m_spaces.end() ? 0 : it->second->connections.size();
}

std::size_t StoreServer::buffered_bytes() const {
  std::size_t total = 0;
  for (const auto& [id, space] : m_impl->m_spaces) {
    for (const auto& [cid, connection] : space->connections) total += connection->buffered_bytes();
  }
  return total;
}

const StoreState& StoreServer::state() const { return m_impl->m_default->state; }
const StoreState& StoreServer::state(KeySpaceId space) const { return m_impl->key_space(space).state; }

void StoreServer::set(KeySpaceId space_id, const std::string& key, const std::string& value) {
  auto& space = m_impl->key_space(space_id);
  Request request;
  request.op = Op::Set;
  request.keys = {key};
  request.values = {value};
  // Connection id 0 is never a client's (they count from 1): the reply goes nowhere.
  Effects effects;
  space.state.apply(0, request, effects);
  static constexpr char k_stop_waiting = static_cast<char>(WaitResponse::StopWaiting);
  for (ConnectionId woken : effects.woken) {
    auto it = space.connections.find(woken);
    if (it != space.connections.end()) it->second->deliver(std::string_view(&k_stop_waiting, 1));
  }
}

}  // namespace rankrun::rendezvous
