#pragma once
// Watches the traffic of the store the job hosts, for the hang monitor and the report: which
// rank connected, which reached init_process_group's rendezvous, the last key each touched,
// the worker runtime's heartbeats and progress records, and the rank each registered as in a
// process group (two workers registering the same rank is logged as an error at once: a
// script that takes its rank from an argument rankrun does not pass, most likely).
//
// Connections are mapped to ranks in batches, never one /proc scan per connection: new
// connections wait until the next resolution, which reads the TCP socket table once and the
// workers' fd tables once for all of them. A resolution runs once connections stop arriving
// (or a pending one has waited a second), and resolutions are spaced out by ten times
// what the last one cost, so a burst of thousands of connections costs a few scans. The scan
// runs on a thread of its own at idle priority (with 16,000 connections open, reading
// /proc/net/tcp alone takes a fifth of a second, which the store's event loop must not wait
// for: its accept queue would overflow); the event loop applies its result once it is done,
// and never waits for it: at the job's end a scan still running is left to finish alone.
// Reports resolve what is pending first, on the spot.

#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "launcher/hangs/connection_owner.hpp"
#include "launcher/report/arrival.hpp"
#include "launcher/report/rank_claims.hpp"
#include "rendezvous/store_server.hpp"

namespace rankrun::launcher {

/// What the store traffic says a rank did, for the hang monitor.
enum class StoreEvent {
  Heartbeat,   // the worker runtime wrote its heartbeat key
  Progress,    // its step changed, or it entered or left a collective
  Rendezvous,  // it joined init_process_group's rendezvous
};

class StoreWatch : public rendezvous::StoreObserver {
 public:
  using Listener = std::function<void(int local_rank, StoreEvent event)>;

  /// `server_port`: the store's port (connections are found in the socket table by it);
  /// `first_rank`: the global rank of this node's local rank 0 (the runtime's keys name global
  /// ranks).
  StoreWatch(boost::asio::io_context& io, std::uint16_t server_port, int first_rank, Listener listener);
  ~StoreWatch() override;
  StoreWatch(const StoreWatch&) = delete;
  StoreWatch& operator=(const StoreWatch&) = delete;
  /// An elastic job's new round gave this node other global ranks.
  void set_first_rank(int first_rank) { m_first_rank = first_rank; }

  /// A new attempt: `pids` are its workers by local rank; every rank starts over as never
  /// connected.
  void start_attempt(std::vector<pid_t> pids);
  /// How far each local rank got; resolves the connections not yet mapped first.
  std::vector<Arrival> arrivals();
  /// This attempt's connections from this host (loopback) that closed before they were mapped
  /// to a rank, or were mapped as their process exited (closed or about to be): a rank that
  /// connected and exited between two looks.
  UnmatchedConnections unmatched() const;
  /// Two workers that registered the same rank in a process group (the first such pair), if
  /// any; resolves the connections not yet mapped first.
  std::optional<DuplicateRank> duplicate_rank();
  /// The last key a rank's connections touched ("" if none).
  std::string last_key(int local_rank);
  /// Called after a heartbeat key was written, with its new step: a changed step is progress.
  void heartbeat_value(int local_rank, std::int64_t step);
  /// Maps every pending connection now (one batch).
  void resolve_now();
  /// The job is over: no more batches (a pending one would keep the io_context running).
  void stop();

  void on_open(std::uint64_t conn, const std::string& peer_ip, std::uint16_t peer_port,
               std::uint16_t local_port) override;
  void on_close(std::uint64_t conn) override;
  void on_request(std::uint64_t conn, rendezvous::Op op, std::string_view first_key) override;

 private:
  static constexpr int k_gone = k_connection_gone;  // mapped after its process closed it or exited
  static constexpr int k_pending = -2;              // not mapped yet
  static constexpr int k_unknown = k_connection_unknown;
  using Mapping = SocketMapping;
  /// What a rank's connections showed, or a pending connection shows until it is mapped.
  struct Seen {
    Arrival arrival = Arrival::NeverConnected;
    std::uint64_t last_seq = 0;
    std::string last_key;
    void merge(const Seen& other);
  };
  struct Connection {
    std::string peer_ip;
    std::uint16_t peer_port = 0;
    int rank = k_pending;                    // local rank once mapped
    Seen seen;                               // while pending or gone
    std::vector<std::string> registrations;  // while pending: the keys that registered a rank
  };

  /// The scan behind a resolution (the socket table and the workers' fd tables).
  static Mapping read_mapping(std::uint16_t server_port, const std::vector<pid_t>& pids);
  /// Maps the connections of `batch` still pending with `mapping`; `cost` spaces the next.
  void apply(const Mapping& mapping, const std::vector<std::uint64_t>& batch, std::chrono::steady_clock::duration cost);
  /// Hands m_pending to a scan on its own thread.
  void resolve_in_background();
  /// Applies the scan's result once it is done (the event loop looks every k_scan_poll).
  void poll_background();
  /// Leaves the scan in flight, if any, to itself (its connections pending again): the job ends,
  /// or a report maps them now.
  void abandon_background();
  /// Owned by the scan's thread and the watch together: the scan's result.
  struct Background {
    std::mutex mutex;
    std::optional<Mapping> result;
    bool done = false;
    std::chrono::steady_clock::time_point began;
  };
  void schedule();
  Seen* seen_by(Connection& c);
  int local_rank_in_key(std::string_view key, std::string_view prefix) const;
  /// Local rank `local_rank` SET `key`, which registers a rank: a duplicate is logged.
  void registered(int local_rank, std::string_view key);

  boost::asio::steady_timer m_timer;
  boost::asio::steady_timer m_scan_timer;  // polls the scan in flight
  std::shared_ptr<Background> m_background = std::make_shared<Background>();
  std::thread m_scan;                     // the scan in flight, if any
  std::vector<std::uint64_t> m_scanning;  // the connections it maps
  std::uint16_t m_server_port;
  int m_first_rank;
  Listener m_listener;
  std::vector<pid_t> m_pids;
  std::unordered_map<std::uint64_t, Connection> m_connections;
  std::vector<std::uint64_t> m_pending;
  std::vector<Seen> m_ranks;  // by local rank
  UnmatchedConnections m_unmatched;
  std::vector<std::int64_t> m_step;
  RankClaims m_claims;
  std::uint64_t m_seq = 0;
  bool m_scheduled = false;
  bool m_stopped = false;
  std::chrono::steady_clock::time_point m_next_allowed{};
  std::chrono::steady_clock::time_point m_last_open{};
  std::chrono::steady_clock::time_point m_oldest_pending{};
};

}  // namespace rankrun::launcher
