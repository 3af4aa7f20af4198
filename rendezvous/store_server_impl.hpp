#pragma once
// StoreServer's insides, shared by the files that implement it, one concern each:
//   store_server.cpp      the public calls, and stopping
//   store_accept.cpp      listening, the accept loop, and the limits on connections
//   store_session.cpp     a connection's requests and its end; the filter on workers' addresses
//   store_handshake.cpp   the key-space handshake, the job secret's proof and credentials
//   store_key_spaces.cpp  key spaces, and the observers told of the traffic

#include <sys/socket.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "rendezvous/key_space_auth.hpp"
#include "rendezvous/store_connection.hpp"
#include "rendezvous/store_server.hpp"
#include "rendezvous/store_state.hpp"

namespace rankrun::rendezvous {

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

/// Whether what a peer did is to be logged: the first time for each address, and for at most
/// 4096 addresses, so that a peer that keeps trying, or a flood from many addresses, fills no
/// disk.
class OncePerAddress {
 public:
  bool first(const std::string& address) {
    return m_logged.size() < k_max_addresses && m_logged.insert(address).second;
  }

 private:
  static constexpr std::size_t k_max_addresses = 4096;
  std::unordered_set<std::string> m_logged;
};

/// A client-sent name for a message: quoted, printable, bounded.
std::string quoted_name(std::string_view name);

class StoreServer::Impl : public std::enable_shared_from_this<Impl>, public ConnectionHost {
 public:
  Impl(boost::asio::io_context& io, ServerOptions options);

  // --- listening, accepting, and the limits on connections (store_accept.cpp) --------------------

  /// Binds and listens (StoreBindError).
  void listen();
  /// Waits until a connection is pending, then accept_ready().
  void do_accept();
  /// Takes every pending connection, k_accept_batch at a time between the other handlers.
  void accept_ready();
  /// Admits the accepted `fd` (or closes it for a limit).
  void add_connection(int fd, const sockaddr_storage& peer, socklen_t peer_size);
  /// The store is full: closes the oldest stranger's connection that has not said what it is,
  /// if any, one that has sent nothing before one in its handshake.
  void make_room();
  /// Whether a silent connection from `ip` may be closed to make room: not from a job host,
  /// while the workers are filtered or (before the nodes are known) agents are expected.
  bool is_stranger(const std::string& ip) const;
  /// Connections::strangers anew, after the job's hosts changed.
  void find_strangers();
  /// `connection` said what it is (or closed): no longer a candidate for make_room().
  void mark_identified(ConnectionId id);
  /// `connection`'s first request past the handshake: it is a worker's (or a plain client's).
  /// False, having closed it, when those already hold all but the agents' reserve.
  bool identify_as_client(StoreConnection& connection);

  // --- a connection's requests and its end; the workers' filter (store_session.cpp) --------------

  void on_connection_request(StoreConnection& connection, const Request& request) override;
  void on_connection_closed(StoreConnection& connection) override;
  /// Whether `connection` may make `request`: false, having closed it, for a worker's
  /// connection from outside the job's hosts while admit_workers_from() filters.
  bool admitted(StoreConnection& connection, const Request& request);
  /// Whether workers may come from `ip` (canonical), while admit_workers_from() filters:
  /// loopback, a node's address, or an agent's source address.
  bool is_job_host(const std::string& ip) const;
  void admit_workers_from(std::optional<std::vector<std::string>> addresses);
  /// Wakes the connections that waited for what `effects` changed in `space`.
  static void wake(KeySpace& space, const Effects& effects);
  void close_all();
  void stop();

  // --- the key-space handshake (store_handshake.cpp) ---------------------------------------------

  /// The key-space handshake (key_space_auth.hpp); true when `request` was part of it.
  bool handshake(StoreConnection& connection, const Request& request);
  /// Sends the handshake's `step` (joining `name` when it admits the connection).
  void finish_handshake(StoreConnection& connection, std::string_view name, const KeySpaceGate::Step& step);
  /// A fresh credential that carries the job secret (ServerOptions::issue_credential), once per
  /// connection.
  void issue_credential(StoreConnection& connection);
  /// Logs `why` with the peer's address, once per address.
  void log_refusal(const StoreConnection& connection, std::string_view why);

  // --- key spaces and observers (store_key_spaces.cpp) -------------------------------------------

  KeySpace* create_key_space(std::string name, bool by_client);
  KeySpaceId begin_key_space(std::string name);
  void end_key_space(KeySpaceId id);
  void reset();
  const KeySpace& key_space(KeySpaceId id) const;
  KeySpace& key_space(KeySpaceId id) { return const_cast<KeySpace&>(std::as_const(*this).key_space(id)); }
  /// Moves `connection` into the key space `name`; empty on success, else why not (nothing
  /// changed). `refusal`: set when the reason is worth the once-per-peer log.
  std::string choose_key_space(StoreConnection& connection, std::string_view name, std::string* refusal = nullptr);
  void add_observer(StoreObserver* observer);
  void remove_observer(StoreObserver* observer);
  // Calls `call(observer)` on each observer present when it starts; stops early once `connection`
  // (when given) is closed by one of them.
  template <typename F>
  void notify(const StoreConnection* connection, F call);

  // The listening socket, and the ids it gives connections.
  struct Listener {
    explicit Listener(boost::asio::io_context& io) : acceptor(io), retry_timer(io) {}
    boost::asio::ip::tcp::acceptor acceptor;
    boost::asio::steady_timer retry_timer;
    std::uint16_t port = 0;
    std::string address;
    ConnectionId next_id = 1;
  };

  // The open connections, and what limits them.
  struct Connections {
    std::size_t open = 0;
    std::size_t limit = 0;                                  // Limits::max_connections, below the descriptor limit
    std::size_t agent_reserve = 0;                          // ServerOptions::agent_reserve, at most half the limit
    std::unordered_map<std::string, std::size_t> per_peer;  // open connections by address
    /// Connections that have not said yet what they are (no request past VALIDATE and PING, or
    /// a handshake under way).
    std::unordered_set<ConnectionId> unidentified;
    /// Those of them from addresses outside the job's hosts (while admit_workers_from()
    /// filters), oldest first: closed to make room when the store is full. Idle connections of
    /// the job's own (torch 1.13's second connection never speaks) are never among them.
    std::map<ConnectionId, std::weak_ptr<StoreConnection>> strangers;
    OncePerAddress refused;  // addresses refused for a limit
  };

  // The job's hosts, and the workers' connections checked against them.
  struct WorkerFilter {
    std::optional<std::set<std::string>> nodes;  // admit_workers_from(), canonical
    /// The addresses (canonical) of connections in key spaces that clients named (the agents'),
    /// and how many each has open.
    std::unordered_map<std::string, std::size_t> agents;
    std::unordered_set<ConnectionId> admitted;  // workers' connections already checked
    OncePerAddress refused;
  };

  // Every key space by id (ordered, for key_spaces()), and by name.
  struct KeySpaces {
    std::map<KeySpaceId, std::unique_ptr<KeySpace>> by_id;
    std::map<std::string, KeySpace*, std::less<>> by_name;
    KeySpace* current_default = nullptr;
    KeySpaceId next_id = 0;
    std::size_t made_by_clients = 0;
  };

  // The key-space handshakes under way.
  struct Handshakes {
    std::unordered_map<ConnectionId, KeySpaceGate> gates;  // sent a challenge, owe their proof
    std::unordered_set<ConnectionId> issued;               // given a credential
    OncePerAddress refused;                                // agents' connections refused
  };

  // Removal during a notification leaves a null slot, swept when the outermost one ends.
  struct Observers {
    std::vector<StoreObserver*> list;
    int notifying = 0;
    bool dirty = false;
  };

  boost::asio::io_context& m_io;
  ServerOptions m_options;
  MemoryBudget m_budget;  // before the key spaces: they give their bytes back as they go
  WorkerFilter m_workers;
  Connections m_connections;
  Listener m_listener;
  Effects m_effects;
  KeySpaces m_spaces;
  Observers m_observers;
  Handshakes m_handshakes;
  bool m_stopped = false;
};

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

template <typename F>
void StoreServer::Impl::notify(const StoreConnection* connection, F call) {
  auto& observers = m_observers.list;
  if (observers.empty()) return;
  {
    NotifyScope scope(m_observers.notifying);
    const std::size_t count = observers.size();  // those added meanwhile hear the next event
    for (std::size_t i = 0; i < count; ++i) {
      if (connection != nullptr && !connection->is_open()) break;
      if (StoreObserver* observer = observers[i]) call(*observer);
    }
  }
  if (m_observers.notifying == 0 && m_observers.dirty) {
    observers.erase(std::remove(observers.begin(), observers.end(), nullptr), observers.end());
    m_observers.dirty = false;
  }
}

}  // namespace rankrun::rendezvous
