#pragma once
// The key-value store a node's link talks to, whichever backend keeps the rendezvous: the
// store host's TCP store (c10d, and the static rendezvous) or etcd (--rdzv-backend=etcd). One
// object per connection and thread, as the clients underneath; interrupt() is the one call
// safe from another thread. Failures throw rendezvous::StoreError.
//
// LinkChannel is how a backend hands its channel to NodeLink, which knows no backend: a way to
// open a connection, and what NodeLink must know of the endpoint to word its messages and to
// tell a fault that may pass from a refusal that will not.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rendezvous/store_client.hpp"

namespace rankrun::rendezvous {
class EtcdClient;  // etcd_client.hpp
}

namespace rankrun::launcher::cluster {

class LinkStore {
 public:
  virtual ~LinkStore() = default;
  virtual void set(std::string_view key, std::string_view value) = 0;
  virtual std::string get(std::string_view key) = 0;
  virtual std::string compare_set(std::string_view key, std::string_view expected, std::string_view desired) = 0;
  virtual std::int64_t add(std::string_view key, std::int64_t delta) = 0;
  virtual void append(std::string_view key, std::string_view value) = 0;
  virtual bool check(const std::vector<std::string>& keys) = 0;
  virtual std::vector<std::string> multi_get(const std::vector<std::string>& keys) = 0;
  virtual bool delete_key(std::string_view key) = 0;
  virtual bool wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
  virtual void interrupt() = 0;
  virtual std::string local_address() = 0;

  // A node's liveness. etcd: a lease of the node timeout, which the keys put with it share and
  // which keep_alive() renews; the keys go when it lapses. The TCP store has no leases: the
  // node refreshes its lease key with a SET and the store host times it (LeaseWatch).
  virtual bool has_leases() const = 0;
  /// A new lease (etcd); 0 where there are none.
  virtual std::int64_t grant(std::chrono::milliseconds ttl) = 0;
  /// set() attached to `lease` (0: none; the TCP store ignores it).
  virtual void set_leased(std::string_view key, std::string_view value, std::int64_t lease) = 0;
  virtual void keep_alive(std::int64_t lease) = 0;
  virtual void revoke(std::int64_t lease) = 0;
};

/// How a connection is opened: NodeLink's timeouts, and its stop.
struct LinkConnect {
  std::chrono::milliseconds connect_timeout{0};
  /// Bounds every reply (and a silent connection) whose request the endpoint's system has not
  /// acknowledged: the link may be down.
  std::chrono::milliseconds reply_timeout{0};
  /// How long a reply is awaited from an endpoint whose system has acknowledged the request (it
  /// is slow or stopped, the link is up); `slow_reply` hears each further reply_timeout of it.
  /// The TCP store's (ClientOptions::patience) and etcd's (EtcdOptions::patience).
  std::chrono::milliseconds patience{0};
  std::function<void(std::chrono::milliseconds waited)> slow_reply;
  /// Readable once the link stops: a connect in progress gives up (-1: none).
  int cancel_fd = -1;
};

/// A node's channel to the rest of the job, as its backend describes it.
struct LinkChannel {
  /// A new connection to the endpoint, in the agents' keys (one per thread). Throws
  /// rendezvous::StoreError.
  std::function<std::unique_ptr<LinkStore>(const LinkConnect& how)> connect;
  /// The endpoint for messages: "the store host H:P", "etcd at H:P". The errors of a connection
  /// may begin with it, or with "cannot reach " and it.
  std::string where;
  /// What to check when it stays unreachable for the rendezvous timeout ("; check ...").
  std::string unreachable_hint;
  /// An error that no retry changes, whenever it comes (a refused certificate, password or
  /// permission): the rendezvous fails at once ("cannot use <where>: ..."), a running node does
  /// not wait --node-timeout to call its endpoint lost. Empty: there is none.
  std::function<bool(const rendezvous::StoreError& e)> denied;
  /// At connect, what else waiting cannot help (the store host refused this node; what answers
  /// there is not a store): the rendezvous's failure, as the node prints it; nullopt: a fault
  /// that may pass. Empty: there is none.
  std::function<std::optional<std::string>(const rendezvous::StoreError& e)> refusal;
};

/// The TCP store's client as a LinkStore.
std::unique_ptr<LinkStore> wrap(std::unique_ptr<rendezvous::StoreClient> client);
/// etcd's client as a LinkStore.
std::unique_ptr<LinkStore> wrap(std::unique_ptr<rendezvous::EtcdClient> client);

}  // namespace rankrun::launcher::cluster
