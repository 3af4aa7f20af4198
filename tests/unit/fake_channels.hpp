#pragma once
// Fakes for what the rendezvous' coordinators talk to, on one FakeStoreHost (fake_link_store.hpp)
// that the nodes' links use too, so that a whole rendezvous runs in memory:
//
// - FakeEtcdSession: etcd as the EtcdCoordinator uses it (its seam, cluster::EtcdSession): the
//   election's create and leases, the listing and the watch of the job's keys (the host's
//   numbered changes), the answers' set_many. Use the host with leases on, as etcd has them.
// - FakeAgentsStore: the agents' keys of the store a node hosts, as its coordinator's parts
//   watch them (cluster::AgentsStore): the host's traffic, posted to the io_context as the
//   store's observers hear it, and its keys.
//
// Faults as the host's: lose_after() makes every call throw, interrupt() ends a session's waits.
// A session's calls are counted with the host's, as "etcd <call>" ("etcd keep_alive").

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "fake_link_store.hpp"
#include "launcher/cluster/etcd_coordinator.hpp"
#include "launcher/cluster/round_host.hpp"

namespace rankrun::launcher::testing {

/// One connection to a fake etcd (a FakeStoreHost with leases).
class FakeEtcdSession final : public cluster::EtcdSession {
 public:
  explicit FakeEtcdSession(FakeStoreHost& host) : m_host(host) {}

  std::int64_t grant_lease(std::chrono::seconds) override {
    auto lock = begin("grant_lease");
    const auto lease = m_host.m_next_lease++;
    m_host.m_leases.insert(lease);
    return lease;
  }
  void keep_alive(std::int64_t lease) override {
    auto lock = begin("keep_alive");
    if (m_host.m_leases.count(lease) == 0)
      throw rendezvous::StoreError("lease " + std::to_string(lease) + " not found");
  }
  void revoke(std::int64_t lease) override {
    auto lock = begin("revoke");
    m_host.drop_lease_locked(lease);
  }
  bool create(std::string_view key, std::string_view value, std::int64_t lease) override {
    auto lock = begin("create " + std::string(key));
    if (m_host.value_locked(key)) return false;
    if (lease != 0) {
      if (m_host.m_leases.count(lease) == 0)
        throw rendezvous::StoreError("lease " + std::to_string(lease) + " not found");
      m_host.m_leased_keys[std::string(key)] = lease;
    }
    m_host.apply_locked(0, FakeStoreHost::request(rendezvous::Op::Set, {std::string(key)}, {std::string(value)}));
    return true;
  }
  bool wait_deleted(std::string_view key, std::chrono::milliseconds timeout) override {
    auto lock = begin("wait_deleted " + std::string(key));
    m_host.m_changed.wait_for(lock, timeout, [&] { return !m_host.value_locked(key) || cut(); });
    throw_if_cut();
    return !m_host.value_locked(key);
  }
  std::vector<std::pair<std::string, std::string>> list(std::string_view key_prefix, std::int64_t& revision) override {
    auto lock = begin("list");
    revision = m_host.m_revision;
    std::vector<std::pair<std::string, std::string>> out;
    for (auto it = m_host.m_keys.lower_bound(std::string(key_prefix));
         it != m_host.m_keys.end() && std::string_view(it->first).substr(0, key_prefix.size()) == key_prefix; ++it) {
      out.emplace_back(*it);
    }
    return out;
  }
  bool watch_prefix(std::string_view key_prefix, std::int64_t& revision, std::chrono::milliseconds timeout,
                    const std::function<bool(const rendezvous::EtcdEvent&)>& on_event) override {
    auto lock = begin("watch_prefix");
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      while (revision < m_host.m_revision) {
        const auto change = m_host.m_changes.at(static_cast<std::size_t>(revision));  // revision + 1's
        revision = change.revision;
        if (std::string_view(change.key).substr(0, key_prefix.size()) != key_prefix) continue;
        if (!on_event(rendezvous::EtcdEvent{change.deleted, change.key, change.value, change.revision})) return true;
      }
      if (!m_host.m_changed.wait_until(lock, deadline, [&] { return revision < m_host.m_revision || cut(); }))
        return false;
      throw_if_cut();
    }
  }
  void set_many(const std::vector<std::pair<std::string, std::string>>& kvs) override {
    auto lock = begin("set_many");
    for (const auto& [key, value] : kvs) {
      m_host.apply_locked(0, FakeStoreHost::request(rendezvous::Op::Set, {key}, {value}));
    }
  }
  void interrupt() override {
    const std::lock_guard lock(m_host.m_mutex);
    m_interrupted = true;
    m_host.m_changed.notify_all();
  }

 private:
  // Locks the host, notes the call, throws when the session is interrupted or the host lost.
  std::unique_lock<std::mutex> begin(const std::string& name) {
    std::unique_lock lock(m_host.m_mutex);
    m_host.m_calls.push_back("etcd " + name);
    throw_if_cut();
    m_host.count_call_locked();
    return lock;
  }
  bool cut() const { return m_interrupted || m_host.m_lost; }
  void throw_if_cut() const {
    if (m_interrupted) throw rendezvous::StoreError("interrupted");
    if (m_host.m_lost) throw rendezvous::StoreError("etcd is gone (lost by the test)");
  }

  FakeStoreHost& m_host;
  bool m_interrupted = false;  // under the host's mutex
};

/// The agents' keys of the store a node hosts, on a FakeStoreHost: its observers hear every
/// client's traffic on `io`'s thread, as the store's own do.
class FakeAgentsStore final : public cluster::AgentsStore {
 public:
  FakeAgentsStore(boost::asio::io_context& io, FakeStoreHost& host)
      : m_host(host), m_observers(std::make_shared<Observers>()) {
    auto observers = m_observers;
    auto* ctx = &io;
    // Each event is posted with the observers as they are when it runs (one removed meanwhile
    // hears nothing more).
    host.listen(
        FakeStoreHost::Traffic{[ctx, observers](rendezvous::ConnectionId c) {
                                 boost::asio::post(*ctx, [observers, c] {
                                   for (auto* o : observers->now()) o->on_join(c, 1, cluster::k_agents_key_space);
                                 });
                               },
                               [ctx, observers](rendezvous::ConnectionId c, rendezvous::Op op, const std::string& key) {
                                 boost::asio::post(*ctx, [observers, c, op, key] {
                                   for (auto* o : observers->now()) o->on_request(c, op, key);
                                 });
                               },
                               [ctx, observers](rendezvous::ConnectionId c) {
                                 boost::asio::post(*ctx, [observers, c] {
                                   for (auto* o : observers->now()) o->on_close(c);
                                 });
                               }});
  }
  ~FakeAgentsStore() override {
    m_host.listen({});
    m_observers->list.clear();
  }
  FakeAgentsStore(const FakeAgentsStore&) = delete;
  FakeAgentsStore& operator=(const FakeAgentsStore&) = delete;

  std::optional<std::string> value(const std::string& key) override { return m_host.value(key); }
  void set(const std::string& key, const std::string& value) override { m_host.set(key, value); }
  void add_observer(rendezvous::StoreObserver* observer) override { m_observers->list.push_back(observer); }
  void remove_observer(rendezvous::StoreObserver* observer) override {
    auto& l = m_observers->list;
    l.erase(std::remove(l.begin(), l.end(), observer), l.end());
  }
  std::size_t connections() const override { return m_host.connections(); }

 private:
  // The io_context's thread only.
  struct Observers {
    std::vector<rendezvous::StoreObserver*> list;
    std::vector<rendezvous::StoreObserver*> now() const { return list; }
  };

  FakeStoreHost& m_host;
  std::shared_ptr<Observers> m_observers;
};

}  // namespace rankrun::launcher::testing
