#pragma once
// A LinkStore for unit tests of the nodes' protocol steps: the store's own semantics
// (rendezvous::StoreState, which the TCP store server applies) in memory, no sockets. One
// FakeStoreHost is the store; each simulated node (or thread) takes its own client from it.
//
// - wait() is the store's WAIT: it returns at once when the keys are there, otherwise it blocks
//   until another client's request wakes it or the timeout passes (then CANCEL_WAIT), so one
//   thread can play several nodes in turn and threads can play them at once.
// - get() and multi_get() wait for their keys first, up to the client's reply timeout, and throw
//   rendezvous::StoreTimeout past it, as StoreClient does.
// - Leases: none by default (has_leases() false: set_leased() is a set, keep_alive() and
//   revoke() do nothing), as the TCP store. With `leases` on, as etcd: grant() gives ids, keys
//   put with a lease go when it is revoked or expire()d, keep_alive() of a gone lease throws.
// - Faults: lose_after(n) lets n more calls through (all clients together), then every call
//   throws rendezvous::StoreError, as when the store host is gone; interrupt() makes the
//   client's calls throw, a blocked wait() included.
// - Every call is noted in the client's `calls` ("set lease/0", "wait stop/0"), to check what a
//   step sends, and in the host's (calls_of()), to count what clients a test does not hold sent.
// - Traffic: listen() hears what a store's observers would (a connection opened in the agents'
//   key space, each request, a connection closed), so that a coordinator's parts can watch the
//   fake as they watch the store they host (fake_channels.hpp).
// - Changes: every change of a key is numbered, as etcd's revisions, so that a fake etcd session
//   can list the keys and watch their changes (fake_channels.hpp).

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "launcher/cluster/link_store.hpp"
#include "rendezvous/store_client.hpp"
#include "rendezvous/store_state.hpp"
#include "rendezvous/wire.hpp"

namespace rankrun::launcher::testing {

struct FakeStoreOptions {
  /// etcd-like leases (see above); false: the TCP store's none.
  bool leases = false;
  /// How long get() and multi_get() wait for a missing key before StoreTimeout.
  std::chrono::milliseconds reply_timeout{50};
};

class FakeLinkStore;
class FakeEtcdSession;

/// The store, shared by its clients (thread-safe).
class FakeStoreHost {
 public:
  explicit FakeStoreHost(FakeStoreOptions options = {}) : m_options(options) {}

  /// A new connection; `address` is what its local_address() says (the host the node is on).
  std::unique_ptr<FakeLinkStore> client(std::string address = "10.0.0.1");

  /// The stored value of `key`, if any.
  std::optional<std::string> value(std::string_view key) {
    const std::lock_guard lock(m_mutex);
    const auto v = m_state.value(key);
    return v ? std::optional<std::string>(std::string(*v)) : std::nullopt;
  }
  /// Sets `key` as a client would (waking its waiters), without counting as a call.
  void set(std::string_view key, std::string_view value) {
    const std::lock_guard lock(m_mutex);
    apply_locked(0, request(rendezvous::Op::Set, {std::string(key)}, {std::string(value)}));
  }
  /// `calls` more calls succeed, then every call throws StoreError (the store host is gone).
  /// lose_after(0) also ends the waits in progress.
  void lose_after(int calls) {
    const std::lock_guard lock(m_mutex);
    m_calls_left = calls;
    m_lost = calls == 0;
    m_changed.notify_all();
  }
  /// etcd: the lease lapses; its keys go.
  void expire(std::int64_t lease) {
    const std::lock_guard lock(m_mutex);
    drop_lease_locked(lease);
  }
  /// WAITs registered and not yet answered or cancelled.
  std::size_t pending_waits() {
    const std::lock_guard lock(m_mutex);
    return m_state.pending_waits();
  }

  /// What the store's observers would hear. Called on the client's thread with the host
  /// locked: post it on, do not call the host back.
  struct Traffic {
    std::function<void(rendezvous::ConnectionId)> opened;  // in the agents' key space
    std::function<void(rendezvous::ConnectionId, rendezvous::Op, const std::string& first_key)> request;
    std::function<void(rendezvous::ConnectionId)> closed;
  };
  /// From now on (an empty Traffic: no more).
  void listen(Traffic traffic) {
    const std::lock_guard lock(m_mutex);
    m_traffic = std::move(traffic);
  }
  /// Connections open now.
  std::size_t connections() {
    const std::lock_guard lock(m_mutex);
    return m_open.size();
  }
  /// How many calls of all clients (and fake etcd sessions) were `entry` ("set lease/1",
  /// "keep_alive").
  int calls_of(std::string_view entry) {
    const std::lock_guard lock(m_mutex);
    return static_cast<int>(std::count(m_calls.begin(), m_calls.end(), entry));
  }

 private:
  friend class FakeLinkStore;
  friend class FakeEtcdSession;

  /// One numbered change of a key, as etcd's watch shows it.
  struct Change {
    bool deleted = false;
    std::string key;
    std::string value;
    std::int64_t revision = 0;
  };

  static rendezvous::Request request(rendezvous::Op op, std::vector<std::string> keys,
                                     std::vector<std::string> values = {}, std::int64_t number = 0) {
    rendezvous::Request r;
    r.op = op;
    r.keys = std::move(keys);
    r.values = std::move(values);
    r.number = number;
    return r;
  }

  // Applies one request under m_mutex; returns the reply bytes. Wakes the waiters it woke, and
  // numbers the changes it made. A client's request (`connection` not 0) is traffic.
  std::string apply_locked(rendezvous::ConnectionId connection, const rendezvous::Request& r) {
    using Op = rendezvous::Op;
    if (connection != 0 && m_traffic.request)
      m_traffic.request(connection, r.op, r.keys.empty() ? std::string() : r.keys[0]);
    std::vector<std::pair<std::string, std::optional<std::string>>> before;
    if (r.op == Op::MultiSet) {
      for (const auto& key : r.keys) before.emplace_back(key, value_locked(key));
    } else if ((r.op == Op::Set || r.op == Op::CompareSet || r.op == Op::Add || r.op == Op::Append ||
                r.op == Op::DeleteKey) &&
               !r.keys.empty()) {
      before.emplace_back(r.keys[0], value_locked(r.keys[0]));
    }
    rendezvous::Effects fx;
    m_state.apply(connection, r, fx);
    if (fx.close) throw rendezvous::StoreError("the store closed the connection: " + fx.error);
    const bool put = r.op == Op::Set || r.op == Op::MultiSet;  // a put is a change, as in etcd, even of the same value
    for (auto& [key, old] : before) {
      auto now = value_locked(key);
      if (now != old || (put && now)) record_locked(key, std::move(now));
    }
    if (!fx.woken.empty()) {
      for (const auto id : fx.woken) m_woken.insert(id);
      m_changed.notify_all();
    }
    return fx.reply;
  }

  // One call of a client: counted against lose_after().
  void count_call_locked() {
    if (m_calls_left < 0) return;
    if (m_calls_left == 0) {
      m_lost = true;
      throw rendezvous::StoreError("the store host is gone (lost by the test)");
    }
    --m_calls_left;
  }

  std::optional<std::string> value_locked(std::string_view key) const {
    const auto v = m_state.value(key);
    return v ? std::optional<std::string>(std::string(*v)) : std::nullopt;
  }

  void record_locked(const std::string& key, std::optional<std::string> now) {
    ++m_revision;
    m_changes.push_back(Change{!now, key, now.value_or(""), m_revision});
    if (now) {
      m_keys[key] = *now;
    } else {
      m_keys.erase(key);
    }
    m_changed.notify_all();
  }

  void drop_lease_locked(std::int64_t lease) {
    m_leases.erase(lease);
    for (auto it = m_leased_keys.begin(); it != m_leased_keys.end();) {
      if (it->second == lease) {
        apply_locked(0, request(rendezvous::Op::DeleteKey, {it->first}));
        it = m_leased_keys.erase(it);
      } else {
        ++it;
      }
    }
  }

  FakeStoreOptions m_options;
  std::mutex m_mutex;
  std::condition_variable m_changed;
  rendezvous::StoreState m_state;
  std::set<rendezvous::ConnectionId> m_woken;  // connections whose WAIT was answered
  rendezvous::ConnectionId m_next_connection = 1;
  int m_calls_left = -1;  // -1: no fault
  bool m_lost = false;    // a call was refused: waits in progress end too
  std::int64_t m_next_lease = 1;
  std::set<std::int64_t> m_leases;
  std::map<std::string, std::int64_t> m_leased_keys;
  Traffic m_traffic;
  std::set<rendezvous::ConnectionId> m_open;
  std::vector<std::string> m_calls;  // every client's, in order
  std::vector<Change> m_changes;     // m_changes[i].revision == i + 1
  std::int64_t m_revision = 0;
  std::map<std::string, std::string> m_keys;  // the keys now, in order (for a listing)
};

/// One connection to a FakeStoreHost. Like the real clients, one thread uses it at a time;
/// interrupt() may come from another.
class FakeLinkStore final : public cluster::LinkStore {
 public:
  FakeLinkStore(FakeStoreHost& host, rendezvous::ConnectionId id, std::string address)
      : m_host(host), m_id(id), m_address(std::move(address)) {}
  ~FakeLinkStore() override {
    const std::lock_guard lock(m_host.m_mutex);
    m_host.m_state.disconnect(m_id);
    m_host.m_open.erase(m_id);
    if (m_host.m_traffic.closed) m_host.m_traffic.closed(m_id);
  }
  FakeLinkStore(const FakeLinkStore&) = delete;
  FakeLinkStore& operator=(const FakeLinkStore&) = delete;

  /// What this client sent, one entry a call: "<op> <first key>".
  std::vector<std::string> calls;

  void set(std::string_view key, std::string_view value) override {
    run(Op::Set, {std::string(key)}, {std::string(value)});
  }
  std::string get(std::string_view key) override {
    const std::vector<std::string> keys{std::string(key)};
    auto lock = begin("get", keys);
    present_or_throw(lock, keys);
    return read_bytes(m_host.apply_locked(m_id, FakeStoreHost::request(Op::Get, keys)), 1).at(0);
  }
  std::string compare_set(std::string_view key, std::string_view expected, std::string_view desired) override {
    const auto reply = run(Op::CompareSet, {std::string(key)}, {std::string(expected), std::string(desired)});
    return read_bytes(reply, 1).at(0);
  }
  std::int64_t add(std::string_view key, std::int64_t delta) override {
    return rendezvous::read_i64(run(Op::Add, {std::string(key)}, {}, delta));
  }
  void append(std::string_view key, std::string_view value) override {
    run(Op::Append, {std::string(key)}, {std::string(value)});
  }
  bool check(const std::vector<std::string>& keys) override {
    return run(Op::Check, keys).at(0) == static_cast<char>(rendezvous::CheckResponse::Ready);
  }
  std::vector<std::string> multi_get(const std::vector<std::string>& keys) override {
    auto lock = begin("multi_get", keys);
    present_or_throw(lock, keys);
    return read_bytes(m_host.apply_locked(m_id, FakeStoreHost::request(Op::MultiGet, keys)), keys.size());
  }
  bool delete_key(std::string_view key) override {
    return rendezvous::read_i64(run(Op::DeleteKey, {std::string(key)})) != 0;
  }
  bool wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    auto lock = begin("wait", keys);
    return wait_locked(lock, keys, timeout);
  }
  void interrupt() override {
    const std::lock_guard lock(m_host.m_mutex);
    m_interrupted = true;
    m_host.m_changed.notify_all();
  }
  std::string local_address() override { return m_address; }

  bool has_leases() const override { return m_host.m_options.leases; }
  std::int64_t grant(std::chrono::milliseconds) override {
    auto lock = begin("grant", {});
    if (!m_host.m_options.leases) return 0;
    const auto lease = m_host.m_next_lease++;
    m_host.m_leases.insert(lease);
    return lease;
  }
  void set_leased(std::string_view key, std::string_view value, std::int64_t lease) override {
    auto lock = begin("set_leased", {std::string(key)});
    if (m_host.m_options.leases && lease != 0) {
      if (m_host.m_leases.count(lease) == 0)
        throw rendezvous::StoreError("lease " + std::to_string(lease) + " not found");
      m_host.m_leased_keys[std::string(key)] = lease;
    }
    m_host.apply_locked(m_id, FakeStoreHost::request(Op::Set, {std::string(key)}, {std::string(value)}));
  }
  void keep_alive(std::int64_t lease) override {
    auto lock = begin("keep_alive", {});
    if (m_host.m_options.leases && m_host.m_leases.count(lease) == 0) {
      throw rendezvous::StoreError("lease " + std::to_string(lease) + " not found");
    }
  }
  void revoke(std::int64_t lease) override {
    auto lock = begin("revoke", {});
    if (m_host.m_options.leases) m_host.drop_lease_locked(lease);
  }

 private:
  using Op = rendezvous::Op;

  // Locks the host, notes the call, throws when the client is interrupted or the host lost.
  std::unique_lock<std::mutex> begin(std::string_view name, const std::vector<std::string>& keys) {
    std::unique_lock lock(m_host.m_mutex);
    calls.push_back(std::string(name) + (keys.empty() ? std::string() : " " + keys[0]));
    m_host.m_calls.push_back(calls.back());
    if (m_interrupted) throw rendezvous::StoreError("interrupted");
    m_host.count_call_locked();
    return lock;
  }

  std::string run(Op op, std::vector<std::string> keys, std::vector<std::string> values = {}, std::int64_t number = 0) {
    auto lock = begin(lower(rendezvous::op_name(op)), keys);
    return m_host.apply_locked(m_id, FakeStoreHost::request(op, std::move(keys), std::move(values), number));
  }

  static std::string lower(std::string_view name) {
    std::string out(name);
    for (auto& c : out) {
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    }
    return out;
  }

  // The store's WAIT, then CANCEL_WAIT at the timeout.
  bool wait_locked(std::unique_lock<std::mutex>& lock, const std::vector<std::string>& keys,
                   std::chrono::milliseconds timeout) {
    m_host.m_woken.erase(m_id);
    if (!m_host.apply_locked(m_id, FakeStoreHost::request(Op::Wait, keys)).empty()) return true;
    const auto woken = m_host.m_changed.wait_for(
        lock, timeout, [&] { return m_host.m_woken.count(m_id) != 0 || m_interrupted || m_host.m_lost; });
    if (m_host.m_woken.erase(m_id) != 0) return true;
    m_host.apply_locked(m_id, FakeStoreHost::request(Op::CancelWait, {}));
    if (woken)
      throw rendezvous::StoreError(m_interrupted ? "interrupted" : "the store host is gone (lost by the test)");
    return false;
  }

  // get() and multi_get(): the keys first, as StoreClient waits for them.
  void present_or_throw(std::unique_lock<std::mutex>& lock, const std::vector<std::string>& keys) {
    if (!wait_locked(lock, keys, m_host.m_options.reply_timeout)) {
      const auto what = "no value for key " + keys.at(0) + " within the reply timeout";
      throw rendezvous::StoreTimeout(what, what);
    }
  }

  // `count` length-prefixed values.
  static std::vector<std::string> read_bytes(std::string_view reply, std::size_t count) {
    std::vector<std::string> out;
    for (std::size_t i = 0; i < count; ++i) {
      const auto size = static_cast<std::size_t>(rendezvous::read_i64(reply));
      out.emplace_back(reply.substr(8, size));
      reply.remove_prefix(8 + size);
    }
    return out;
  }

  FakeStoreHost& m_host;
  rendezvous::ConnectionId m_id;
  std::string m_address;
  bool m_interrupted = false;  // under the host's mutex
};

inline std::unique_ptr<FakeLinkStore> FakeStoreHost::client(std::string address) {
  const std::lock_guard lock(m_mutex);
  const rendezvous::ConnectionId id = m_next_connection++;
  auto client = std::make_unique<FakeLinkStore>(*this, id, std::move(address));
  m_open.insert(id);
  if (m_traffic.opened) m_traffic.opened(id);
  return client;
}

}  // namespace rankrun::launcher::testing
