#pragma once
// Watches the store's traffic to know which rank connected and which reached the rendezvous.

#include <sys/types.h>

#include <functional>
#include <map>
#include <vector>

#include "launcher/arrival.hpp"
#include "rendezvous/store_server.hpp"

namespace rankrun::launcher {

class StoreWatch : public rendezvous::StoreObserver {
 public:
  /// `worker_pids` gives the current attempt's worker pids, by local rank.
  explicit StoreWatch(std::function<std::vector<pid_t>()> worker_pids);

  /// A new attempt: every rank starts over as never connected.
  void reset(std::size_t ranks);
  const std::vector<Arrival>& arrivals() const { return m_arrivals; }

  void on_open(std::uint64_t conn, const std::string& peer_ip, std::uint16_t peer_port, std::uint16_t local_port) override;
  void on_close(std::uint64_t conn) override;
  void on_request(std::uint64_t conn, rendezvous::Op op, std::string_view first_key) override;

 private:
  int rank_of_socket(const std::string& peer_ip, std::uint16_t peer_port, std::uint16_t local_port) const;

  std::function<std::vector<pid_t>()> m_worker_pids;
  std::vector<Arrival> m_arrivals;
  std::map<std::uint64_t, int> m_conn_rank;  // connection -> local rank (-1: not a worker's)
};

}  // namespace rankrun::launcher
