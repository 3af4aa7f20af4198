#pragma once
// The key-value store a node's link talks to, whichever backend keeps the rendezvous: the
// store host's TCP store (c10d, and the static rendezvous) or etcd (--rdzv-backend=etcd). One
// object per connection and thread, as the clients underneath; interrupt() is the one call
// safe from another thread. Failures throw rendezvous::StoreError.

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "rendezvous/etcd_client.hpp"
#include "rendezvous/store_client.hpp"

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

/// The TCP store's client as a LinkStore.
std::unique_ptr<LinkStore> wrap(std::unique_ptr<rendezvous::StoreClient> client);
/// etcd's client as a LinkStore.
std::unique_ptr<LinkStore> wrap(std::unique_ptr<rendezvous::EtcdClient> client);

}  // namespace rankrun::launcher::cluster
