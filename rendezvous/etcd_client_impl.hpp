#pragma once
// EtcdClient's insides, shared by the files that implement it, one concern each:
//   etcd_connection.cpp  connecting (TCP, TLS), sending and receiving bytes, interrupt()
//   etcd_http.cpp        one request and its reply (etcd_http.hpp: the wire format and bounds)
//   etcd_auth.cpp        etcd's user authentication: the token, and what etcd refuses for good
//   etcd_client.cpp      etcd's operations (range, txn, read-modify-write) and the public calls
//   etcd_watch.cpp       watch streams: wait(), wait_deleted(), watch_prefix()

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rendezvous/etcd_client.hpp"
#include "rendezvous/etcd_http.hpp"
#include "rendezvous/etcd_json.hpp"
#include "rendezvous/tcp_connection.hpp"
#include "rendezvous/tls_connection.hpp"

namespace rankrun::rendezvous {

struct EtcdSecurity::Impl {
  EtcdAccess access;
  std::unique_ptr<tls::Context> tls;  // with https
  std::mutex mutex;
  std::string token;  // the user's, shared by every client; empty until the first connect
};

struct EtcdClient::Impl {
  using Clock = tcp::Clock;
  using Reply = etcd_http::Reply;
  using Response = etcd_http::Response;

  // One TCP connection and what it received that is not consumed yet.
  struct Conn {
    int fd = -1;
    std::string in;
    std::size_t pos = 0;
    bool used = false;                  // carried a request: etcd may have closed it since
    std::unique_ptr<tls::Session> tls;  // with https, once the handshake is done
  };

  enum class WatchEnd { Seen, TimedOut, Compacted, AuthExpired };

  std::string host;
  std::uint16_t port;
  std::string prefix;
  EtcdOptions options;
  Conn main;   // requests and replies, kept alive between calls
  Conn watch;  // one watch stream, open only while wait() or wait_deleted() waits
  // interrupt() writes it: every poll watches it, so a blocked call wakes whatever it waits on
  // (connect and backoff included).
  int wake_fd = -1;
  int own_wake_fd = -1;  // interrupt()'s; wake_fd is it, or an epoll set of it and cancel_fd
  // interrupt() may come from another thread: it and every change of a socket hold this mutex.
  std::mutex fd_mutex;
  std::atomic<bool> interrupted{false};
  // With options.security: its parts, and the token the last request carried.
  EtcdSecurity::Impl* security = nullptr;
  std::string sent_token;

  Impl(std::string h, std::uint16_t p, std::string pre, EtcdOptions o);
  ~Impl();
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  std::string where() const { return tcp::endpoint_name(host, port); }
  // A failure of `kind`: "etcd at H:P: " + `detail`.
  [[noreturn]] void error(StoreFailure kind, const std::string& detail) const;
  // The same, refused for good: EtcdDenied.
  [[noreturn]] void deny_with(const std::string& detail) const;
  std::string full(std::string_view key) const { return prefix + std::string(key); }
  bool https() const { return security != nullptr && security->tls != nullptr; }
  bool authenticating() const { return security != nullptr && !security->access.user.empty(); }

  // --- the connections (etcd_connection.cpp) ---------------------------------------------------

  void close(Conn& c);
  void interrupt();
  [[noreturn]] void throw_interrupted() const;
  // A TLS failure that trying again cannot change.
  [[noreturn]] void denied(Conn& c, std::string what);  // a copy: `what` may be the session's own
  [[noreturn]] void fail(Conn& c, const std::string& what, StoreFailure kind = StoreFailure::Failed);
  // A failure of a socket that interrupt() shut down is the interrupt.
  [[noreturn]] void io_failed(const std::string& what, StoreFailure kind = StoreFailure::Failed);
  // interrupt() was called, or the owner's cancel_fd is readable.
  bool woken() const;
  void pause(std::chrono::milliseconds duration);
  // One attempt over every resolved address; empty string on success, else why it failed.
  // The socket stays non-blocking: every wait is a poll() with the call's deadline.
  std::string connect_once(Conn& c, Clock::time_point deadline);
  // TLS on the connection just made; empty string on success, else why it failed (the
  // connection is closed then). EtcdDenied when trying again cannot help.
  std::string handshake(Conn& c, Clock::time_point deadline);
  // Connects, retrying for options.connect_timeout (and no later than `cap`).
  void open(Conn& c, Clock::time_point cap);
  // The request connection, ready for a request. A kept-alive connection that has become
  // readable between requests was closed (or reset) by etcd, or carries bytes no request of
  // ours asked for: it is replaced before sending rather than a request being resent after a
  // failure, since etcd may have applied it.
  void ensure_fresh();
  void send_all(Conn& c, std::string_view bytes, Clock::time_point deadline);
  // A TLS connection failed: etcd's alert (our certificate refused) is EtcdDenied.
  [[noreturn]] void tls_failed(Conn& c, const std::string& what);
  // Receives what is there (waiting up to `deadline`); false on timeout.
  bool fill(Conn& c, Clock::time_point deadline);

  // --- one request and its reply (etcd_http.cpp) -----------------------------------------------

  void send_post(Conn& c, std::string_view path, std::string_view body, Clock::time_point deadline,
                 bool with_token = true);
  // Feeds the parser until `done()`; false at `deadline`.
  bool read_until(Conn& c, Response& r, Clock::time_point deadline, const std::function<bool()>& done);
  Reply exchange_once(std::string_view path, std::string_view body, bool with_token);
  // A reply not done by options.timeout (sent at `sent`): read on, up to options.patience, while
  // etcd's host has everything sent; IoError (NoReply) when it does not or the patience ends.
  void await_patiently(Response& r, Clock::time_point sent);
  // A POST whose reply is one JSON object; etcd's errors and malformed replies throw.
  JsonValue call(std::string_view path, std::string_view body);
  // etcd answered, with an error: the connection stays.
  [[noreturn]] void refused(std::string_view path, const Reply& reply, const std::optional<JsonValue>& json) const;
  [[noreturn]] void malformed(std::string_view path, std::string_view detail = "not in the shape etcd sends");

  // --- etcd's user authentication (etcd_auth.cpp) ----------------------------------------------

  // One POST on the request connection, bounded by options.timeout. When etcd no longer takes
  // the user's token, a fresh one is taken and the request sent once more (etcd refused it
  // before applying it).
  Reply exchange(std::string_view path, std::string_view body);
  // A token for the user, unless another client of the same EtcdSecurity took one since this
  // one's last request.
  void renew_token();
  std::string authenticate();
  // With TLS or a user: the first connect proves them (a token taken once for every client of
  // the EtcdSecurity, and one read of the client's prefix), so that what etcd refuses is known
  // before the client is used.
  void prove();
  // What etcd said that trying again cannot change, in words that say what to do; `request`
  // ("POST /v3/watch: ") comes first.
  [[noreturn]] void deny(const std::string& request, std::string_view message) const;
  static bool denial(std::string_view message);
  // A watch cancelled because etcd no longer takes the token (its reason is gRPC's text: "rpc
  // error: code = Unauthenticated desc = etcdserver: invalid auth token").
  static bool watch_token_refused(std::string_view cancel_reason);
  // etcd's refusals that no retry changes: EtcdDenied.
  void throw_if_denied(const std::string& request, const Reply& reply, const std::optional<JsonValue>& json) const;

  // --- etcd's operations (etcd_client.cpp) -----------------------------------------------------

  etcd::RangeResult range(const std::string& full_key, bool keys_only);
  etcd::TxnResult txn(const std::string& body);
  // Each key's state (nullopt: missing) and the revision it was read at; one txn per
  // k_max_txn_ops keys.
  struct Presence {
    std::vector<std::optional<etcd::KeyValue>> kvs;
    std::vector<std::int64_t> revisions;
  };
  Presence read_keys(const std::vector<std::string>& full_keys, bool keys_only);
  // Read-modify-write of one key: `next` maps the current value (nullopt: missing) to the new
  // one, retried until no other writer came in between.
  void read_modify_write(std::string_view key, std::string_view what,
                         const std::function<std::string(const std::optional<std::string>&)>& next);
  [[noreturn]] void timed_out(std::chrono::milliseconds timeout, const std::vector<std::string>& keys) const;

  // --- watches (etcd_watch.cpp) ----------------------------------------------------------------

  using OnEvent = std::function<bool(const etcd::WatchEvent&)>;
  // A watch stream of the create requests in `body`, on a connection of its own that is closed
  // when this returns (closing is how a gateway watch ends): each event goes to `on_event`,
  // which returns true to end the watch (Seen); TimedOut at `deadline`.
  WatchEnd watch_stream(const std::string& body, Clock::time_point deadline, const OnEvent& on_event);
  WatchEnd watch_stream_once(const std::string& body, Clock::time_point deadline, const OnEvent& on_event);
  // Watches `targets` (full key -> the revision it was read at) from the next revision on,
  // until every one has an event of the kind `filter` keeps, or `deadline`.
  WatchEnd watch_keys(const std::map<std::string, std::int64_t>& targets, etcd::WatchFilter filter,
                      Clock::time_point deadline);
  bool wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  bool wait_deleted(std::string_view key, std::chrono::milliseconds timeout);
};

}  // namespace rankrun::rendezvous
