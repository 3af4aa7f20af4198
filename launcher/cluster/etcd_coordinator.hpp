#pragma once
// --rdzv-backend=etcd: the rounds are kept by one of the job's rankruns, elected in etcd, so
// that no node is the rendezvous: every rankrun campaigns (a create of `coordinator` attached
// to a lease of --node-timeout); the winner keeps its lease alive and watches every key of the
// job (one watch, no polling), and when it is lost its lease lapses and another one takes over
// from what etcd holds. It is the RoundHost's RoundKeys: it reads the joins from its copy of
// the watched keys and writes its answers in order, on a thread of its own.
//
// Threads: the campaigner (election, then the watch and the lease) and the writer, each with
// its own etcd connection (an EtcdSession: etcd's client, or the tests' fake). Everything they
// learn reaches the Job as a handler posted to its io_context.

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "launcher/cluster/round_host.hpp"
#include "rendezvous/etcd_client.hpp"

namespace rankrun::launcher::cluster {

/// The key the coordinator holds (value: its host and pid).
inline constexpr const char* k_coordinator_key = "coordinator";

/// One connection to etcd, as the coordinator uses it: EtcdClient's calls of the same names and
/// meaning (keys without the job's prefix). One thread uses it at a time; interrupt() may come
/// from another. Failures throw rendezvous::StoreError.
class EtcdSession {
 public:
  virtual ~EtcdSession() = default;
  virtual std::int64_t grant_lease(std::chrono::seconds ttl) = 0;
  virtual void keep_alive(std::int64_t lease) = 0;
  virtual void revoke(std::int64_t lease) = 0;
  virtual bool create(std::string_view key, std::string_view value, std::int64_t lease) = 0;
  virtual bool wait_deleted(std::string_view key, std::chrono::milliseconds timeout) = 0;
  virtual std::vector<std::pair<std::string, std::string>> list(std::string_view key_prefix,
                                                                std::int64_t& revision) = 0;
  virtual bool watch_prefix(std::string_view key_prefix, std::int64_t& revision, std::chrono::milliseconds timeout,
                            const std::function<bool(const rendezvous::EtcdEvent&)>& on_event) = 0;
  virtual void set_many(const std::vector<std::pair<std::string, std::string>>& kvs) = 0;
  virtual void interrupt() = 0;
};

class EtcdCoordinator final : public RoundKeys {
 public:
  struct Settings {
    std::string host;  // etcd's
    std::uint16_t port = 0;
    std::string prefix;  // the job's keys: /rankrun/<rdzv-id>/
    std::chrono::milliseconds node_timeout{std::chrono::seconds(15)};
    std::string name;                                    // this node, as the coordinator key shows it
    std::shared_ptr<rendezvous::EtcdSecurity> security;  // https, etcd's user; none: plain http
    /// A new connection; empty: etcd's client at host:port, under prefix, with security.
    std::function<std::unique_ptr<EtcdSession>()> connect;
  };
  /// Called on the io_context's thread, never after stop().
  struct Hooks {
    /// This node coordinates from now on; value() and keys() show the job's keys as they were.
    std::function<void()> elected;
    /// A change of one of the job's keys, after elected(), in etcd's order; value() already
    /// shows it.
    std::function<void(const rendezvous::EtcdEvent& event)> changed;
    /// Coordinating stopped: etcd could not be reached, or the coordinator key was lost.
    std::function<void(std::string why)> failed;
  };

  EtcdCoordinator(boost::asio::io_context& io, Settings settings, Hooks hooks);
  ~EtcdCoordinator() override;
  EtcdCoordinator(const EtcdCoordinator&) = delete;
  EtcdCoordinator& operator=(const EtcdCoordinator&) = delete;

  void start();
  /// Ends both threads; the writes queued before are sent first, for at most `drain`. This
  /// node's coordinator key is given up (another rankrun may take over at once).
  void stop(std::chrono::milliseconds drain = std::chrono::seconds(2));

  // The io_context's thread only:
  bool elected() const { return m_elected; }
  std::optional<std::string> value(const std::string& key) override;
  /// The job's keys starting with `prefix`, in key order.
  std::vector<std::pair<std::string, std::string>> keys(const std::string& prefix) const;
  /// Queued for the writer: written in the order of the calls.
  void set(const std::string& key, const std::string& value) override;

 private:
  void campaign_main();
  void writer_main();
  std::unique_ptr<EtcdSession> connect();
  void hold(EtcdSession* client, bool campaigner);
  bool stopping() const;
  void post(std::function<void()> fn);

  boost::asio::io_context& m_io;
  Settings m_settings;
  Hooks m_hooks;
  std::shared_ptr<bool> m_alive;
  bool m_elected = false;                       // io thread
  std::map<std::string, std::string> m_values;  // io thread: the job's keys as last seen

  mutable std::mutex m_mutex;
  std::condition_variable m_wake;
  bool m_stopping = false;
  std::chrono::steady_clock::time_point m_drain_until{};
  std::deque<std::pair<std::string, std::string>> m_writes;
  std::int64_t m_lease = 0;
  EtcdSession* m_campaign_client = nullptr;
  EtcdSession* m_writer_client = nullptr;
  std::thread m_campaigner;
  std::thread m_writer;
};

}  // namespace rankrun::launcher::cluster
