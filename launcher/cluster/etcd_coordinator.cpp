#include "launcher/cluster/etcd_coordinator.hpp"

#include <algorithm>
#include <boost/asio/post.hpp>
#include <optional>
#include <spdlog/spdlog.h>

#include "launcher/cluster/attempt_steps.hpp"  // lease_interval

namespace rankrun::launcher::cluster {
namespace {
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
namespace rdzv = rankrun::rendezvous;

// Between two tries to reach etcd before this node coordinates (the node's own link reports
// an etcd it cannot reach).
constexpr milliseconds k_retry_pause{1000};
constexpr milliseconds k_write_first_pause{50};
// How long a campaigner's watch for the coordinator key to go lasts before it is opened again
// (stop() interrupts it at once).
constexpr milliseconds k_campaign_wait{30000};
// The most queued writes the writer sends in one go (set_many splits them into transactions).
constexpr std::size_t k_max_batch = 4096;

// etcd's client as the coordinator's session.
class ClientSession final : public EtcdSession {
 public:
  explicit ClientSession(std::unique_ptr<rdzv::EtcdClient> client) : m_client(std::move(client)) {}
  std::int64_t grant_lease(std::chrono::seconds ttl) override { return m_client->grant_lease(ttl); }
  void keep_alive(std::int64_t lease) override { m_client->keep_alive(lease); }
  void revoke(std::int64_t lease) override { m_client->revoke(lease); }
  bool create(std::string_view key, std::string_view value, std::int64_t lease) override {
    return m_client->create(key, value, lease);
  }
  bool wait_deleted(std::string_view key, milliseconds timeout) override {
    return m_client->wait_deleted(key, timeout);
  }
  std::vector<std::pair<std::string, std::string>> list(std::string_view key_prefix, std::int64_t& revision) override {
    return m_client->list(key_prefix, revision);
  }
  bool watch_prefix(std::string_view key_prefix, std::int64_t& revision, milliseconds timeout,
                    const std::function<bool(const rdzv::EtcdEvent&)>& on_event) override {
    return m_client->watch_prefix(key_prefix, revision, timeout, on_event);
  }
  void set_many(const std::vector<std::pair<std::string, std::string>>& kvs) override { m_client->set_many(kvs); }
  void interrupt() override { m_client->interrupt(); }

 private:
  std::unique_ptr<rdzv::EtcdClient> m_client;
};
}  // namespace

EtcdCoordinator::EtcdCoordinator(boost::asio::io_context& io, Settings settings, Hooks hooks)
    : m_io(io), m_settings(std::move(settings)), m_hooks(std::move(hooks)), m_alive(std::make_shared<bool>(true)) {}

EtcdCoordinator::~EtcdCoordinator() { stop(milliseconds(0)); }

void EtcdCoordinator::start() {
  m_campaigner = std::thread([this] { campaign_main(); });
  m_writer = std::thread([this] { writer_main(); });
}

bool EtcdCoordinator::stopping() const {
  const std::lock_guard lock(m_mutex);
  return m_stopping;
}

void EtcdCoordinator::post(std::function<void()> fn) {
  boost::asio::post(m_io, [alive = m_alive, fn = std::move(fn)] {
    if (*alive) fn();
  });
}

void EtcdCoordinator::hold(EtcdSession* client, bool campaigner) {
  const std::lock_guard lock(m_mutex);
  (campaigner ? m_campaign_client : m_writer_client) = client;
  if (client && m_stopping && (campaigner || Clock::now() >= m_drain_until)) client->interrupt();
}

std::unique_ptr<EtcdSession> EtcdCoordinator::connect() {
  if (m_settings.connect) return m_settings.connect();
  rdzv::EtcdOptions options;
  options.connect_timeout = std::max(milliseconds(300), m_settings.node_timeout / 3);
  options.timeout = options.connect_timeout;
  options.user_timeout = options.connect_timeout;
  // A busy or stopped etcd is waited for (its host acknowledges), as the node link waits; the
  // node link says so.
  options.patience = m_settings.node_timeout;
  options.security = m_settings.security;
  return std::make_unique<ClientSession>(
      std::make_unique<rdzv::EtcdClient>(m_settings.host, m_settings.port, m_settings.prefix, options));
}

void EtcdCoordinator::stop(milliseconds drain) {
  {
    const std::lock_guard lock(m_mutex);
    if (m_stopping && !m_campaigner.joinable() && !m_writer.joinable()) return;
    m_stopping = true;
    m_drain_until = Clock::now() + drain;
    if (m_campaign_client) m_campaign_client->interrupt();
  }
  *m_alive = false;
  m_wake.notify_all();
  if (m_campaigner.joinable()) m_campaigner.join();
  {
    // The writer sends what is queued (the answers to the last nodes) until the deadline.
    std::unique_lock lock(m_mutex);
    m_wake.wait_until(lock, m_drain_until, [this] { return m_writes.empty(); });
    if (m_writer_client) m_writer_client->interrupt();
  }
  m_wake.notify_all();
  if (m_writer.joinable()) m_writer.join();
  // The coordinator key goes with its lease: another rankrun may take over at once.
  if (const auto lease = std::exchange(m_lease, 0); lease != 0) {
    try {
      connect()->revoke(lease);
    } catch (const rdzv::StoreError&) {
    }
  }
}

std::optional<std::string> EtcdCoordinator::value(const std::string& key) {
  const auto it = m_values.find(key);
  if (it == m_values.end()) return std::nullopt;
  return it->second;
}

std::vector<std::pair<std::string, std::string>> EtcdCoordinator::keys(const std::string& prefix) const {
  std::vector<std::pair<std::string, std::string>> out;
  for (auto it = m_values.lower_bound(prefix); it != m_values.end() && it->first.compare(0, prefix.size(), prefix) == 0;
       ++it) {
    out.emplace_back(*it);
  }
  return out;
}

void EtcdCoordinator::set(const std::string& key, const std::string& value) {
  // The copy shows it at once: a RoundHost that reads what it just wrote finds it.
  m_values[key] = value;
  {
    const std::lock_guard lock(m_mutex);
    m_writes.emplace_back(key, value);
  }
  m_wake.notify_all();
}

void EtcdCoordinator::writer_main() {
  std::unique_ptr<EtcdSession> client;
  for (;;) {
    // Everything queued so far goes in one go (a round's answers: a few transactions, not one
    // round trip per node); a key written twice keeps its last value.
    std::vector<std::pair<std::string, std::string>> batch;
    std::size_t taken = 0;
    {
      std::unique_lock lock(m_mutex);
      m_wake.wait(lock, [this] { return !m_writes.empty() || m_stopping; });
      if (m_writes.empty() || (m_stopping && Clock::now() >= m_drain_until)) break;
      std::map<std::string, std::size_t> at;
      for (; taken < m_writes.size() && taken < k_max_batch; ++taken) {
        const auto& [key, value] = m_writes[taken];
        if (const auto it = at.find(key); it != at.end()) {
          batch[it->second].second = value;
        } else {
          at.emplace(key, batch.size());
          batch.emplace_back(key, value);
        }
      }
    }
    // Tried again on a fresh connection, a pause apart, until --node-timeout has passed since
    // the first failure (etcd paused, a short cut): the nodes wait for these answers. Writes
    // that still fail are dropped and logged; by then every node finds etcd gone on its own.
    std::optional<Clock::time_point> give_up;
    for (milliseconds pause = k_write_first_pause;; pause = std::min(pause * 2, k_retry_pause)) {
      try {
        if (!client) {
          client = connect();
          hold(client.get(), false);
        }
        client->set_many(batch);
        break;
      } catch (const rdzv::StoreError& e) {
        hold(nullptr, false);
        client.reset();
        if (!give_up) give_up = Clock::now() + m_settings.node_timeout;
        if (Clock::now() + pause >= *give_up || (stopping() && Clock::now() >= m_drain_until)) {
          if (!stopping()) {
            spdlog::warn("could not write {} key{} to etcd ({}...) for {} s (--node-timeout): {}", batch.size(),
                         batch.size() == 1 ? "" : "s", batch.front().first, m_settings.node_timeout.count() / 1000.0,
                         e.what());
          }
          break;
        }
      }
      std::unique_lock lock(m_mutex);
      m_wake.wait_for(lock, pause, [this] { return m_stopping && Clock::now() >= m_drain_until; });
    }
    {
      const std::lock_guard lock(m_mutex);
      m_writes.erase(m_writes.begin(), m_writes.begin() + static_cast<std::ptrdiff_t>(taken));
    }
    m_wake.notify_all();
  }
  hold(nullptr, false);
  m_wake.notify_all();
}

void EtcdCoordinator::campaign_main() {
  const auto interval = lease_interval(m_settings.node_timeout);
  bool elected = false;
  while (!stopping()) {
    std::unique_ptr<EtcdSession> client;
    try {
      client = connect();
      hold(client.get(), true);
      // The campaign: the first create of the key wins; the others wait for it to go.
      while (!elected) {
        const auto lease = client->grant_lease(std::chrono::ceil<std::chrono::seconds>(m_settings.node_timeout));
        if (client->create(k_coordinator_key, m_settings.name, lease)) {
          const std::lock_guard lock(m_mutex);
          m_lease = lease;
          elected = true;
          break;
        }
        client->revoke(lease);
        while (!client->wait_deleted(k_coordinator_key, k_campaign_wait)) {
          if (stopping()) break;
        }
        if (stopping()) break;
      }
      if (!elected) break;
      // Coordinating: what etcd holds now, then every change, in order.
      std::int64_t revision = 0;
      auto now = client->list("", revision);
      post([this, now = std::move(now)]() mutable {
        m_values.clear();
        for (auto& [k, v] : now) m_values.emplace(std::move(k), std::move(v));
        m_elected = true;
        if (m_hooks.elected) m_hooks.elected();
      });
      std::int64_t lease = 0;
      {
        const std::lock_guard lock(m_mutex);
        lease = m_lease;
      }
      bool lost_key = false;
      // A request that fails (etcd paused, a short cut) is tried again on a fresh connection,
      // the watch resuming at the revision it reached, until --node-timeout has passed since
      // etcd last answered: the lease outlives shorter faults, and so does the coordinator.
      auto last_answer = Clock::now();
      while (!stopping() && !lost_key) {
        try {
          if (!client) {
            client = connect();
            hold(client.get(), true);
          }
          client->keep_alive(lease);
          client->watch_prefix("", revision, interval, [&](const rdzv::EtcdEvent& e) {
            if (e.key == k_coordinator_key && e.deleted) lost_key = true;
            post([this, e] {
              if (e.deleted) {
                m_values.erase(e.key);
              } else {
                m_values[e.key] = e.value;
              }
              if (m_hooks.changed) m_hooks.changed(e);
            });
            return !lost_key;
          });
          last_answer = Clock::now();
        } catch (const rdzv::StoreError& e) {
          hold(nullptr, true);
          client.reset();
          if (stopping()) break;
          if (Clock::now() - last_answer >= m_settings.node_timeout) throw;
          spdlog::warn("coordinator: etcd did not answer ({}); trying again until --node-timeout", e.what());
          std::unique_lock lock(m_mutex);
          m_wake.wait_for(lock, k_retry_pause, [this] { return m_stopping; });
        }
      }
      if (lost_key && !stopping()) {
        post([this] {
          if (m_hooks.failed) m_hooks.failed("this node's coordinator key in etcd went away (its lease lapsed)");
        });
      }
      break;
    } catch (const rdzv::StoreError& e) {
      hold(nullptr, true);
      if (stopping()) break;
      if (elected) {
        post([this, why = std::string(e.what())] {
          if (m_hooks.failed) m_hooks.failed(why);
        });
        break;
      }
      // Not coordinating yet: try again; the node's link reports an etcd it cannot reach.
      std::unique_lock lock(m_mutex);
      m_wake.wait_for(lock, k_retry_pause, [this] { return m_stopping; });
    }
  }
  hold(nullptr, true);
}

}  // namespace rankrun::launcher::cluster
