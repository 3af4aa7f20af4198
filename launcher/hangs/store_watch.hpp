#pragma once
// Watches the store's traffic to know which rank connected and which reached the rendezvous.

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "launcher/arrival.hpp"
#include "rendezvous/store_server.hpp"

namespace rankrun::launcher {

/// What the store traffic says a rank did, for the hang monitor.
enum class StoreEvent {
  Heartbeat,   // the worker runtime wrote rankrun/hb/<rank>
  Progress,    // its step changed, or it entered or left a collective (rankrun/coll/<rank>)
  Rendezvous,  // it joined init_process_group's rendezvous
};

class StoreWatch : public rendezvous::StoreObserver {
 public:
  using Listener = std::function<void(int local_rank, StoreEvent event)>;

  /// `worker_pids` gives the current attempt's worker pids, by local rank.
  explicit StoreWatch(std::function<std::vector<pid_t>()> worker_pids);

  /// A new attempt: every rank starts over as never connected.
  void reset(std::size_t ranks);
  const std::vector<Arrival>& arrivals() const { return m_arrivals; }
  /// The last key a rank's connections touched ("" if none).
  std::string last_key(int local_rank) const;
  void set_listener(Listener listener) { m_listener = std::move(listener); }
  /// Called by the owner after a heartbeat key was written, with its new value: a changed step
  /// is progress.
  void heartbeat_value(int local_rank, std::int64_t step);

  void on_open(std::uint64_t conn, const std::string& peer_ip, std::uint16_t peer_port, std::uint16_t local_port) override;
  void on_close(std::uint64_t conn) override;
  void on_request(std::uint64_t conn, rendezvous::Op op, std::string_view first_key) override;

 private:
  int rank_of_socket(const std::string& peer_ip, std::uint16_t peer_port, std::uint16_t local_port) const;

  std::function<std::vector<pid_t>()> m_worker_pids;
  std::vector<Arrival> m_arrivals;
  std::map<std::uint64_t, int> m_conn_rank;  // connection -> local rank (-1: not a worker's)
  std::vector<std::string> m_last_key;
  std::vector<std::int64_t> m_step;
  Listener m_listener;
};

}  // namespace rankrun::launcher
