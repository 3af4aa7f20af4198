#pragma once
// Blocking client for etcd's v3 HTTP/JSON gateway (etcd >= 3.4, /v3/kv/..., /v3/lease/...,
// /v3/watch), so that a launcher's rendezvous can live in etcd: StoreClient's operations, with
// the same meaning where the name matches, plus leases. Requests go over one keep-alive
// HTTP/1.1 connection; wait() and wait_deleted() open a second one for etcd's watch stream for
// as long as they wait (no polling). Deadlines on every call, as with StoreClient. Over http or
// https (OpenSSL, tls_connection.hpp), with etcd's user authentication or without.
// Public header: C++17.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "rendezvous/store_client.hpp"  // StoreError, StoreTimeout

namespace rankrun::rendezvous {

/// etcd, or what answers at its address, refused this client for a reason that trying again
/// cannot change: etcd's certificate failed verification, etcd refused this client's certificate
/// or its user's password, the user may not use the client's keys, what answers does not speak
/// TLS. The message says which, and what to change.
struct EtcdDenied : StoreError {
  /// `detail`: the message without the endpoint's name.
  EtcdDenied(const std::string& what, std::string detail)
      : StoreError(StoreFailure::Refused, what, std::move(detail)) {}
};

/// How a client reaches etcd beyond plain HTTP. The TLS settings take the names of torch's etcd
/// rendezvous (--rdzv-conf protocol=https,cacert=,cert=,key=).
struct EtcdAccess {
  /// TLS, with etcd's certificate verified (its subjectAltName must name the host connected to).
  bool https = false;
  /// PEM: the CAs that may sign etcd's certificate; empty: the system's.
  std::string cacert;
  /// PEM: this client's certificate and its unencrypted private key, both or neither.
  std::string cert;
  std::string key;
  /// etcd's v3 authentication: a token for `user` is taken with `password` at the first connect
  /// and sent with every request; taken again when etcd says it is no longer valid.
  std::string user;
  std::string password;
  /// Where the password came from, for messages ("password_file=/run/secrets/etcd").
  std::string password_origin;
};

/// An EtcdAccess made ready once (files read and checked) and shared by every client of a
/// process, with the user's token: thread-safe.
class EtcdSecurity {
 public:
  /// Reads and checks cacert, cert and key; StoreError naming the file and the problem.
  explicit EtcdSecurity(EtcdAccess access);
  ~EtcdSecurity();
  EtcdSecurity(const EtcdSecurity&) = delete;
  EtcdSecurity& operator=(const EtcdSecurity&) = delete;

  const EtcdAccess& access() const;

  struct Impl;  // the client's side of it (etcd_client_impl.hpp)
  Impl& impl() const { return *m_impl; }

 private:
  std::unique_ptr<Impl> m_impl;
};

struct EtcdOptions {
  /// How long to keep retrying a connection (refused / reset / unresolvable host).
  std::chrono::milliseconds connect_timeout{std::chrono::seconds(60)};
  /// Bounds every reply, and is get()'s and multi_get()'s wait when none is given.
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
  /// As ClientOptions::user_timeout: non-zero makes a silent etcd host fail the connection
  /// after about this long, also while a wait() only listens.
  std::chrono::milliseconds user_timeout{0};
  /// As ClientOptions::patience: a reply not come within `timeout` is awaited up to `patience` in
  /// all while etcd's host has acknowledged every byte sent (etcd busy or stopped, not a link
  /// down), calling `on_slow_reply` with the time waited at each further `timeout`. Watches keep
  /// to `timeout` for their first reply.
  std::chrono::milliseconds patience{0};
  std::function<void(std::chrono::milliseconds waited)> on_slow_reply;
  /// As ClientOptions::cancel_fd: readable once the owner stops, and every wait of the client
  /// (its connects and backoff included) gives up at once. Not owned.
  int cancel_fd = -1;
  /// TLS and authentication; none: plain HTTP, no user.
  std::shared_ptr<EtcdSecurity> security;
};

/// One change seen by EtcdClient::watch_prefix().
struct EtcdEvent {
  bool deleted = false;
  std::string key;    // without the client's prefix
  std::string value;  // empty for a deletion
  std::int64_t revision = 0;
};

/// Connections to one etcd endpoint; one call at a time. Not thread-safe (one client per
/// thread) except interrupt(). Every key is stored under `prefix` + key; keys and values are
/// bytes. Failures throw StoreError naming the endpoint; waits that time out return false
/// (get() and multi_get() throw StoreTimeout).
class EtcdClient {
 public:
  /// Connects (retrying for options.connect_timeout). `host` may be a name, an IPv4 or an IPv6
  /// address ("::1"). With options.security, also authenticates (once per EtcdSecurity) and
  /// reads `prefix`, so that a refused certificate, password or permission is EtcdDenied here
  /// rather than at the first call.
  EtcdClient(std::string host, std::uint16_t port, std::string prefix, EtcdOptions options = {});
  ~EtcdClient();
  EtcdClient(EtcdClient&&) noexcept;
  EtcdClient& operator=(EtcdClient&&) noexcept;
  EtcdClient(const EtcdClient&) = delete;
  EtcdClient& operator=(const EtcdClient&) = delete;

  void set(std::string_view key, std::string_view value);
  /// Every pair (distinct keys), in as few transactions as etcd takes (k_max_txn_ops puts and about
  /// 512 KiB each): one round trip for many answers.
  void set_many(const std::vector<std::pair<std::string, std::string>>& kvs);
  /// Put attached to a lease: the key is deleted when the lease lapses or is revoked.
  void set(std::string_view key, std::string_view value, std::int64_t lease);
  /// The value now, without waiting; nullopt when the key does not exist.
  std::optional<std::string> try_get(std::string_view key);
  /// Waits until `key` exists (up to `timeout`, default options.timeout), then returns it;
  /// StoreTimeout past the deadline.
  std::string get(std::string_view key);
  std::string get(std::string_view key, std::chrono::milliseconds timeout);
  /// torch semantics, in one txn: missing and `expected` empty: stores `desired`; missing and
  /// `expected` not empty: stores nothing and returns `expected`; equal to `expected`: stores
  /// `desired`. Returns the value now stored.
  std::string compare_set(std::string_view key, std::string_view expected, std::string_view desired);
  /// Atomic (a txn on the key's mod_revision, retried on conflict); a missing key counts as 0.
  /// StoreError when the value is not an integer.
  std::int64_t add(std::string_view key, std::int64_t delta);
  /// Atomic like add(); a missing key is created.
  void append(std::string_view key, std::string_view value);
  bool check(const std::vector<std::string>& keys);
  /// Waits for every key (up to options.timeout, then StoreTimeout), then returns their
  /// values in order.
  std::vector<std::string> multi_get(const std::vector<std::string>& keys);
  /// true when the key existed.
  bool delete_key(std::string_view key);
  /// true once every key exists; false when `timeout` passed first. Watches the missing keys
  /// from the revision they were found missing at, so no put in between is lost.
  bool wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  /// true once `key` does not exist (deleted, or its lease lapsed); false past `timeout`.
  bool wait_deleted(std::string_view key, std::chrono::milliseconds timeout);

  /// Puts `value` only when `key` does not exist (attached to `lease` when not 0); true when it
  /// did. The step of an election.
  bool create(std::string_view key, std::string_view value, std::int64_t lease = 0);
  /// Every key starting with `key_prefix`, without the client's prefix, with its value, in key
  /// order; `revision` gets the revision they were read at (watch_prefix() continues from it).
  std::vector<std::pair<std::string, std::string>> list(std::string_view key_prefix, std::int64_t& revision);
  /// Streams each change of a key starting with `key_prefix` after `revision`, in order, to
  /// `on_event` (keys without the client's prefix) and advances `revision` past it, until
  /// `on_event` returns false (true) or `timeout` passes (false). StoreError when the stream
  /// fails, or when etcd compacted `revision` away (list() again).
  bool watch_prefix(std::string_view key_prefix, std::int64_t& revision, std::chrono::milliseconds timeout,
                    const std::function<bool(const EtcdEvent&)>& on_event);

  /// A lease of `ttl` (etcd may round it up to its minimum); returns its id.
  std::int64_t grant_lease(std::chrono::seconds ttl);
  /// One refresh of the lease to its full TTL; StoreError when it has lapsed or was revoked.
  void keep_alive(std::int64_t lease);
  /// Ends the lease and deletes its keys. A lease that is already gone is not an error.
  void revoke(std::int64_t lease);

  const std::string& host() const;
  std::uint16_t port() const;
  const std::string& prefix() const;
  /// The one call that is safe from another thread: makes the call in progress fail at once
  /// with StoreError, and every later one too. The client cannot be used again.
  void interrupt();
  /// This end's numeric address on the connection to etcd (connects first when not connected).
  std::string local_address();

 private:
  struct Impl;
  std::unique_ptr<Impl> m_impl;
};

}  // namespace rankrun::rendezvous
