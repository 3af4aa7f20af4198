#pragma once
// The torch-compatible TCPStore server, on the caller's io_context (single-threaded: every
// callback below runs on the thread that runs that io_context).
//
// Unlike torch's servers it binds only the address it is given (127.0.0.1 by default; "0.0.0.0"
// or "::" for every interface), never lets one slow or half-sent client stall the others, and
// closes only the offending connection on malformed or oversized input, with a log line. One
// server holds several key spaces (below): a restart of one node's workers drops their keys and
// connections and nobody else's.

#include <boost/asio/io_context.hpp>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "rendezvous/key_space_auth.hpp"
#include "rendezvous/messages.hpp"
#include "rendezvous/store_state.hpp"
#include "rendezvous/wire.hpp"

namespace rankrun::rendezvous {

/// A key space of a StoreServer: its own keys, queues and waits, and the connections that
/// belong to it. Ids are never reused within one server.
using KeySpaceId = std::uint32_t;

/// Lets the launcher watch store traffic (which worker connected, who ADDed "init/"...).
/// Callbacks run on the io_context thread and must not throw. They may call
/// StoreServer::end_key_space(), begin_key_space(), reset(), stop(), add_observer() and
/// remove_observer(); when that closes the connection being served, its request is dropped and
/// the observers after this one do not hear of it (they get on_close). An observer added during
/// a callback hears from the next event on; one removed during a callback hears nothing more.
struct StoreObserver {
  virtual ~StoreObserver() = default;
  /// A client connected. `conn` is unique for the server's lifetime. With `peer_ip`/`peer_port`
  /// and the server's address, port_owner.hpp's pid_of_tcp_socket() finds the client process.
  virtual void on_open(std::uint64_t conn, const std::string& peer_ip, std::uint16_t peer_port,
                       std::uint16_t local_port) {
    (void)conn, (void)peer_ip, (void)peer_port, (void)local_port;
  }
  /// `conn` joined key space `space`, named `name`: right after on_open, into the server's
  /// default key space of that moment; and once more when its first request chose another key
  /// space by name (k_key_space_key), in which case it had done nothing in the first one.
  virtual void on_join(std::uint64_t conn, KeySpaceId space, std::string_view name) {
    (void)conn, (void)space, (void)name;
  }
  /// The connection closed, whoever closed it (including end_key_space(), reset() and stop()).
  virtual void on_close(std::uint64_t conn) { (void)conn; }
  /// A complete request arrived and is about to be applied; `first_key` is empty for ops
  /// without keys. Not called for VALIDATE, nor for the SET of k_key_space_key that chooses a
  /// key space (on_join tells that one).
  virtual void on_request(std::uint64_t conn, Op op, std::string_view first_key) {
    (void)conn, (void)op, (void)first_key;
  }
};

struct ServerOptions {
  /// Numeric address or host name; "0.0.0.0" / "::" listen on every interface ("::" dual-stack).
  std::string bind_address = "127.0.0.1";
  /// 0: the kernel picks one; port() tells which.
  std::uint16_t port = 0;
  /// The command-line flag that sets `port`, named in StoreBindError's advice ("pass --port=0
  /// or ..."): rankrun-store's is "--port", the launcher's "--master-port".
  std::string port_flag = "--port";
  /// Whether port 0 is advice worth giving: not where other processes must know the port in
  /// advance (a multi-node job's store): the advice is then another free port.
  bool any_port_will_do = true;
  /// The flag that sets limits.max_connections_per_peer, named when an address is refused.
  std::string per_address_flag = "--max-connections-per-address";
  /// Protocol table for connections that do not open with VALIDATE.
  ProtocolChoice protocol = ProtocolChoice::Auto;
  Limits limits;
  /// Key spaces created by clients (a SET of k_key_space_key naming a key space that does not
  /// exist) that may exist at once; a client asking for one more is closed. Key spaces begun
  /// with begin_key_space() do not count and are never refused. 0: a store for workers alone;
  /// a client that names any key space is refused (and logged once per address).
  std::size_t max_client_key_spaces = 256;
  /// Bytes all key spaces may hold together (StoreState's MemoryBudget); a request that would
  /// pass it closes its connection. 0: unbounded.
  std::uint64_t memory_quota = 0;
  /// Key spaces outside the quota (rankrun's agents' own records: a flood of workers' keys must
  /// not stop the job's own bookkeeping).
  std::vector<std::string> unmetered_key_spaces;
  /// The job secret (job_secret.hpp): a connection that asks for a key space by name must
  /// prove it (key_space_auth.hpp), and a plain SET of k_key_space_key is refused. Null: no
  /// secret; any connection may name a key space that a client created.
  std::shared_ptr<const JobSecret> job_secret;
  /// With `job_secret`: hands the secret out (MUNGE, under Slurm): a fresh credential that
  /// carries it, for a connection that asks (key_space_auth.hpp), once per connection. May throw
  /// std::exception (that connection is refused). Called on the io_context's thread. Empty:
  /// the store hands out none.
  std::function<std::string()> issue_credential;
  /// Connections kept for those that join a key space by name through the handshake (rankrun's
  /// agents): the others (workers', plain clients') may hold the connection limit less this
  /// many, so that a flood of them cannot crowd out the nodes' own links. At most half the limit
  /// is kept. A new connection counts as neither until its first request past VALIDATE and PING
  /// says which it is; while the store is full, the oldest such connection is closed to make
  /// room for a new one (a peer holding connections open without a word cannot keep out those
  /// that speak). 0: nothing kept.
  std::size_t agent_reserve = 0;
};

/// The server could not listen. The message names the address, the process holding the port
/// when it can be found, and what to do (with ServerOptions::port_flag).
struct StoreBindError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
/// The port is taken (by another store, or by anything else).
struct StorePortInUse : StoreBindError {
  using StoreBindError::StoreBindError;
};

/// Key spaces. Every connection belongs to exactly one key space, with its own StoreState:
/// keys set in one are invisible in the others, a WAIT is woken only by its own key space, and
/// GETNUMKEYS counts its own keys. A new connection joins the *default* key space, unless its
/// first request (VALIDATE and PING may come before it) names a key space: the handshake of
/// key_space_auth.hpp (a COMPARE_SET of k_key_space_key, with a proof of the job secret when
/// the server has one), or, on a server without a secret, a SET of k_key_space_key whose value
/// is the name (not stored, no reply). The connection then joins the key space of that name,
/// which is created (empty) when none exists. Only key spaces that clients created can be
/// joined by name: those begun with begin_key_space() (the workers' of each attempt, and the
/// first "default") are reached only as the default of new connections. The connection is
/// refused and closed, and only it, when the name is not valid (is_valid_key_space_name()),
/// names a key space begun with begin_key_space(), would pass
/// ServerOptions::max_client_key_spaces, when its proof is missing or wrong, or when the
/// handshake's keys come after the first request. A refusal that concerns the secret or the
/// workers' key spaces is logged once per peer address. The launcher begins one key space per
/// attempt for its workers (unmodified torch clients, which join the default), while rankrun's
/// agents name theirs.
///
/// Before any begin_key_space() there is one key space, id 0, named "default": a server used
/// without key spaces behaves as a plain TCPStore.
class StoreServer {
 public:
  using KeySpaceId = rendezvous::KeySpaceId;

  /// Binds and listens at once (throws StoreBindError); serving starts when `io` runs.
  /// `observer`, when given, is added as by add_observer().
  StoreServer(boost::asio::io_context& io, ServerOptions options, StoreObserver* observer = nullptr);
  /// stop()s, without calling the observers.
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  /// The bound port (the kernel's choice when options.port was 0).
  std::uint16_t port() const;
  /// The address actually bound, as text ("127.0.0.1").
  const std::string& address() const;

  /// Creates an empty key space named `name` and makes it the default one, which new
  /// connections join from now on; connections already open stay where they are. Throws
  /// std::invalid_argument when `name` is not valid (is_valid_key_space_name()) or is the name
  /// of a key space that exists.
  KeySpaceId begin_key_space(std::string name);
  /// Drops key space `space`: its keys, queues and waits, and its connections, which are closed
  /// (each reported through on_close); other key spaces and their connections are untouched.
  /// Ending the default key space begins a fresh, empty one with the same name (a new id),
  /// which becomes the default: there is always a default for new connections. An id that does
  /// not exist (any more) is ignored. Its name is free again afterwards: a client that names it
  /// later creates a new, empty key space.
  void end_key_space(KeySpaceId space);
  /// The key space that new connections join.
  KeySpaceId default_key_space() const;
  /// The key space named `name`, if one exists.
  std::optional<KeySpaceId> find_key_space(std::string_view name) const;
  /// Throws std::out_of_range when `space` does not exist.
  const std::string& key_space_name(KeySpaceId space) const;
  /// Every key space that exists, in increasing id order.
  std::vector<KeySpaceId> key_spaces() const;

  /// Observers, called in the order they were added; adding one twice has no effect. The
  /// server does not own them: remove one before destroying it while the server lives.
  void add_observer(StoreObserver* observer);
  void remove_observer(StoreObserver* observer);

  /// Deprecated (use begin_key_space() and end_key_space()): ends every key space, closing
  /// every connection (each reported through on_close), then begins a fresh default key space
  /// with the old default's name. Keeps listening on the same port.
  void reset();
  /// Stops listening and closes every connection. Idempotent; the destructor calls it. The key
  /// spaces and their keys stay readable.
  void stop();

  /// Workers come only from these addresses (the job's nodes) and loopback: a connection in a
  /// key space the server began (the workers') from any other address is closed at its first
  /// request past the handshake, and each such peer is logged once. nullopt (the default): any
  /// address. Key spaces that clients name (the agents', behind the job secret) are not
  /// filtered: a node that is not in the map yet must be able to join.
  void admit_workers_from(std::optional<std::vector<std::string>> addresses);

  /// Open connections, in every key space.
  std::size_t connection_count() const;
  /// Open connections of `space` (0 when it does not exist).
  std::size_t connection_count(KeySpaceId space) const;
  /// Memory held by the buffers of every open connection (read and write buffers' capacity).
  std::size_t buffered_bytes() const;
  /// Read access to the keys of the default key space (e.g. to see which ranks have arrived).
  const StoreState& state() const;
  /// Read access to the keys of `space`; throws std::out_of_range when it does not exist. The
  /// reference is valid until that key space ends.
  const StoreState& state(KeySpaceId space) const;
  /// A SET made by the server's owner (on the io_context's thread), as if a client had sent it:
  /// the clients waiting for `key` wake up. Observers are not told. Throws std::out_of_range
  /// when `space` does not exist.
  void set(KeySpaceId space, const std::string& key, const std::string& value);

 private:
  class Impl;
  std::shared_ptr<Impl> m_impl;
};

}  // namespace rankrun::rendezvous
