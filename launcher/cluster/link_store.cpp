#include "launcher/cluster/link_store.hpp"

#include <algorithm>

#include "rendezvous/etcd_client.hpp"

namespace rankrun::launcher::cluster {
namespace {

// The operations both clients have, under the same names and meaning.
template <typename Client>
class Wrapped : public LinkStore {
 public:
  explicit Wrapped(std::unique_ptr<Client> client) : m_client(std::move(client)) {}
  void set(std::string_view key, std::string_view value) override { m_client->set(key, value); }
  std::string get(std::string_view key) override { return m_client->get(key); }
  std::string compare_set(std::string_view key, std::string_view expected, std::string_view desired) override {
    return m_client->compare_set(key, expected, desired);
  }
  std::int64_t add(std::string_view key, std::int64_t delta) override { return m_client->add(key, delta); }
  void append(std::string_view key, std::string_view value) override { m_client->append(key, value); }
  bool check(const std::vector<std::string>& keys) override { return m_client->check(keys); }
  std::vector<std::string> multi_get(const std::vector<std::string>& keys) override {
    return m_client->multi_get(keys);
  }
  bool delete_key(std::string_view key) override { return m_client->delete_key(key); }
  bool wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    return m_client->wait(keys, timeout);
  }
  void interrupt() override { m_client->interrupt(); }
  std::string local_address() override { return m_client->local_address(); }

 protected:
  std::unique_ptr<Client> m_client;
};

class TcpStore final : public Wrapped<rendezvous::StoreClient> {
 public:
  using Wrapped::Wrapped;
  bool has_leases() const override { return false; }
  std::int64_t grant(std::chrono::milliseconds) override { return 0; }
  void set_leased(std::string_view key, std::string_view value, std::int64_t) override { m_client->set(key, value); }
  void keep_alive(std::int64_t) override {}
  void revoke(std::int64_t) override {}
};

class Etcd final : public Wrapped<rendezvous::EtcdClient> {
 public:
  using Wrapped::Wrapped;
  bool has_leases() const override { return true; }
  std::int64_t grant(std::chrono::milliseconds ttl) override {
    // etcd's TTLs are whole seconds: rounded up, so that a lease never lapses early.
    const auto seconds = std::chrono::ceil<std::chrono::seconds>(ttl);
    return m_client->grant_lease(std::max(seconds, std::chrono::seconds(1)));
  }
  void set_leased(std::string_view key, std::string_view value, std::int64_t lease) override {
    m_client->set(key, value, lease);
  }
  void keep_alive(std::int64_t lease) override { m_client->keep_alive(lease); }
  void revoke(std::int64_t lease) override { m_client->revoke(lease); }
};

}  // namespace

std::unique_ptr<LinkStore> wrap(std::unique_ptr<rendezvous::StoreClient> client) {
  return std::make_unique<TcpStore>(std::move(client));
}

std::unique_ptr<LinkStore> wrap(std::unique_ptr<rendezvous::EtcdClient> client) {
  return std::make_unique<Etcd>(std::move(client));
}

}  // namespace rankrun::launcher::cluster
