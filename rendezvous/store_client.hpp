#pragma once
// Blocking client for rankrun's store (and for any torch TCPStore server): connect retry with
// backoff, deadlines on every call. Used by the launcher and by the worker runtime.
// Public header: C++17 so that the worker runtime's users can include it.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace rankrun::rendezvous {

/// What went wrong talking to a store (or to etcd), for the code that decides what to do about
/// it; the message is for people.
enum class StoreFailure {
  Failed,       // anything else: a system call failed, a malformed reply, a request not valid here
  Unreachable,  // no connection within the connect timeout (refused, reset, no route, no such host)
  NotAStore,    // something answers at the endpoint, but not as a store does
  Refused,      // the store or etcd will not have this client (key space, job secret, user, certificate)
  NoReply,      // a reply did not come by its deadline
  Closed,       // the server closed or reset the connection
  Interrupted,  // the client's owner stopped it (interrupt(), the cancel descriptor)
  Timeout,      // a wait (or a get, which waits) ran past its deadline: its keys are not set
};

/// Where in a connection's life it went wrong.
enum class StoreStage {
  Connect,    // the TCP (or TLS) connection
  Handshake,  // the protocol's handshake (the store's VALIDATE and PING, the key space)
  Request,    // a request on a connection that was ready
};

/// Any failure talking to the store: connection refused past the deadline, connection closed,
/// a malformed reply. The message names the endpoint; kind(), stage() and detail() say what
/// happened without it.
struct StoreError : std::runtime_error {
  /// A failure of kind Failed; its detail is the message.
  explicit StoreError(const std::string& what) : StoreError(StoreFailure::Failed, what, what) {}
  /// `detail`: the message without the endpoint's name: the operation and the system's or the
  /// server's words ("MULTI_GET: no reply within 1000 ms", "Connection refused").
  StoreError(StoreFailure kind, const std::string& what, std::string detail, StoreStage stage = StoreStage::Request)
      : std::runtime_error(what), m_kind(kind), m_stage(stage), m_detail(std::move(detail)) {}
  StoreFailure kind() const noexcept { return m_kind; }
  StoreStage stage() const noexcept { return m_stage; }
  const std::string& detail() const noexcept { return m_detail; }

 private:
  StoreFailure m_kind;
  StoreStage m_stage;
  std::string m_detail;
};

/// Something answers at the endpoint, but not as a store does (an HTTP server on that port, a
/// wrong --master-port): retrying cannot help. Thrown by the connection, at once.
struct StoreNotAStore : StoreError {
  StoreNotAStore(const std::string& what, std::string detail)
      : StoreError(StoreFailure::NotAStore, what, std::move(detail), StoreStage::Handshake) {}
};

/// The store refused this client's key-space handshake (key_space_auth.hpp), or could not prove
/// the job secret itself: retrying cannot help. The message names the endpoint and why.
struct StoreRefused : StoreError {
  StoreRefused(const std::string& what, std::string detail, bool differ, std::string reason = {})
      : StoreError(StoreFailure::Refused, what, std::move(detail), StoreStage::Handshake),
        secrets_differ(differ),
        server_reason(std::move(reason)) {}
  /// The two ends do not share a job secret: one has none, or they have different ones.
  bool secrets_differ;
  /// The store's own words when it sent a refusal ("wrong job secret"); empty when this end
  /// refused what the store answered.
  std::string server_reason;
};

/// A job secret (rendezvous/key_space_auth.hpp; made by rendezvous/job_secret.hpp).
class JobSecret;

/// A wait (or a get, which waits) ran past its deadline. The message names the keys.
struct StoreTimeout : StoreError {
  StoreTimeout(const std::string& what, std::string detail)
      : StoreError(StoreFailure::Timeout, what, std::move(detail)) {}
};

/// Protocol generation the client speaks (torchrun.md §5.3). Newest is right for rankrun's
/// store and torch >= 2.2 servers; the others exist to talk to older torch servers (benchmarks,
/// mixed jobs). V1_13 has no CANCEL_WAIT: a wait that times out closes the connection (the next
/// call reconnects) because torch 1.13's own recovery would misread the late reply.
enum class ClientProtocol { Newest, V2_1, V1_13 };

struct ClientOptions {
  /// How long to keep retrying the connection (refused / reset / unresolvable host).
  std::chrono::milliseconds connect_timeout{std::chrono::seconds(60)};
  /// Default deadline for get() and wait() when none is passed; also bounds every other reply
  /// (torch's client would block forever on a server that stops answering).
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
  ClientProtocol protocol = ClientProtocol::Newest;
  /// Non-empty: on every (re)connect, join the key space of this name on rankrun's store (it is
  /// created when it does not exist) instead of the server's default one, with the key-space
  /// handshake (rendezvous/key_space_auth.hpp: a COMPARE_SET of "rankrun/key-space" as the
  /// first request, and a proof of `job_secret` when there is one) before the connection is
  /// used. 1 to 256 printable ASCII characters without blanks, else the constructor throws
  /// StoreError. A refusal throws StoreRefused, at once; a server that answers the handshake as
  /// rankrun's store does not (a torch server) is not a store for this (StoreNotAStore).
  std::string key_space;
  /// With `key_space`: the job secret this client proves, and which the store must prove too.
  /// Null: none (a store that has one refuses the client).
  std::shared_ptr<const JobSecret> job_secret;
  /// With `key_space` and no `job_secret`: first ask the store for the job secret in a
  /// credential (MUNGE, under Slurm) and take it with this function, which returns the secret
  /// or throws std::exception saying why it is not taken (the client then throws StoreRefused).
  /// The secret is kept for this client's reconnects.
  std::function<std::shared_ptr<const JobSecret>(const std::string& credential)> take_credential;
  /// Non-zero: a peer that stops acknowledging (host down, cable cut) fails the connection
  /// after about this long, even while the client only waits: TCP_USER_TIMEOUT for unacked
  /// data, and keep-alive probes (idle and interval a third of it) for an idle connection.
  /// Zero: the kernel's defaults (minutes to hours).
  std::chrono::milliseconds user_timeout{0};
  /// Longer than `timeout`: a reply that has not come within `timeout` is awaited on, up to
  /// `patience` in all, for as long as the server's kernel has acknowledged every byte sent (a
  /// server that is slow or stopped, not a link that is down); each further `timeout` of waiting
  /// calls `on_slow_reply` with the time waited so far. Not longer: `timeout` bounds every reply.
  std::chrono::milliseconds patience{0};
  std::function<void(std::chrono::milliseconds waited)> on_slow_reply;
  /// >= 0: a descriptor (an eventfd, a pipe) that becomes readable when the owner stops; from
  /// then on a connect in progress (the constructor's included), its backoff and its handshake
  /// give up at once with StoreError. Not owned; it must outlive the client.
  int cancel_fd = -1;
};

/// One TCP connection to a store; one request outstanding at a time. Not thread-safe: use one
/// client per thread. Keys are sent exactly as given (no "/" prefix is added, unlike torch's
/// Python client), so keys written by torch clients appear here with their leading "/".
/// The client speaks the newest protocol generation (VALIDATE + PING handshake).
class StoreClient {
 public:
  StoreClient(std::string host, std::uint16_t port, ClientOptions options = {});
  ~StoreClient();
  StoreClient(StoreClient&&) noexcept;
  StoreClient& operator=(StoreClient&&) noexcept;
  StoreClient(const StoreClient&) = delete;
  StoreClient& operator=(const StoreClient&) = delete;

  void set(std::string_view key, std::string_view value);
  /// Waits until `key` exists (up to `timeout`, default options.timeout), then returns it.
  std::string get(std::string_view key);
  std::string get(std::string_view key, std::chrono::milliseconds timeout);
  std::int64_t add(std::string_view key, std::int64_t delta);
  /// torch semantics: see the server; returns the value now stored (or `expected` when the key
  /// is missing and `expected` is not empty).
  std::string compare_set(std::string_view key, std::string_view expected, std::string_view desired);
  bool check(const std::vector<std::string>& keys);
  /// true when every key exists; false when `timeout` passed first (the wait is cancelled). When
  /// the keys arrive just as the wait is cancelled, the server's STOP_WAITING wins: true.
  bool wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  bool delete_key(std::string_view key);
  std::int64_t num_keys();
  void append(std::string_view key, std::string_view value);
  std::vector<std::string> multi_get(const std::vector<std::string>& keys);
  void multi_set(const std::vector<std::string>& keys, const std::vector<std::string>& values);

  /// Every key of the key space (not the queues), as stored: keys written by torch clients have
  /// their leading "/" (torch's own list_keys() drops it, and keys without it). rankrun's store
  /// lists them in byte order, torch's in no order. Newest protocol only.
  std::vector<std::string> list_keys();
  /// torch's Store.barrier (BARRIER): counts this arrival at `key` and waits until `world_size`
  /// arrivals were counted there. false when `timeout` passed first (the wait is cancelled; the
  /// arrival stays counted, as on torch's servers, so the key is spent). The counter stays at
  /// `key` as decimal text: a key reused for a barrier of the same size passes at once. Newest
  /// protocol only.
  bool barrier(std::string_view key, std::int64_t world_size, std::chrono::milliseconds timeout);

  /// Queues (torch >= 2.8's queue_push / queue_pop / queue_len; newest protocol only, and a torch
  /// server serves them only with its libuv backend). Queues are not keys: list_keys(),
  /// num_keys() and delete_key() do not see them; check() and wait() see a non-empty one.
  void queue_push(std::string_view key, std::string_view value);
  /// The oldest item, or nullopt when the queue is empty (torch raises QueueEmptyError).
  std::optional<std::string> queue_pop(std::string_view key);
  /// Waits up to `timeout` for an item (WAIT on the queue's key, then pop, as torch's blocking
  /// queue_pop does; again when another client took the item first); nullopt when none came.
  std::optional<std::string> queue_pop(std::string_view key, std::chrono::milliseconds timeout);
  std::int64_t queue_len(std::string_view key);

  /// Round trip that checks the server answers (PING; GETNUMKEYS before 2.5's PING existed).
  void ping();

  const std::string& host() const;
  std::uint16_t port() const;
  /// The one call that is safe from another thread: makes the call in progress fail at once
  /// with StoreError, and every later one too (a thread blocked in wait() can be woken for
  /// shutdown). The client cannot be used again.
  void interrupt();

  /// This end's address on the connection (numeric, e.g. "10.0.0.2" or "fd00::2"): the address
  /// the store host sees this client at. Connects first when not connected.
  std::string local_address();

 private:
  struct Impl;
  std::unique_ptr<Impl> m_impl;
};

}  // namespace rankrun::rendezvous
