#pragma once
// The agents: N threads in this process, each with its own EtcdClient (a LinkStore, as NodeLink
// makes it), running the steps NodeLink's watcher runs; and what they share with the main thread.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "launcher/cluster/records.hpp"

namespace rankrun::bench::etcd_bench {

namespace cluster = ::rankrun::launcher::cluster;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

/// Node `i`'s record, its instance id as long as rankrun's own.
cluster::NodeRecord bench_node(int i);

enum class Death { Silent, Revoke };

// What the main thread and the agents share.
struct Control {
  std::mutex mutex;
  std::condition_variable main_cv;    // the main thread waits here
  std::condition_variable agents_cv;  // the agents wait here
  int connected = 0;
  int granted = 0;
  int joined = 0;
  int stage = 0;  // 1: grant the lease; 2: join
  std::atomic<bool> abort{false};
  // Where a running agent reconnects after its next wait (the counting proxy); 0: it keeps its
  // connection.
  std::atomic<std::uint16_t> run_port{0};
  std::atomic<int> victim{-1};  // the node rank that dies at its next lease refresh
  Death death = Death::Silent;
};

struct AgentResult {
  Clock::time_point done{};  // holds its round (or gave up)
  bool ok = false;
  int node_rank = -1;
  std::string error;                             // no usable round
  std::string run_error;                         // failed while running (its lease gone, etcd unreachable)
  std::optional<Clock::time_point> join_put;     // its PUT join/<me> returned
  std::optional<Clock::time_point> assign_seen;  // its wait for assign/<me> returned
  std::atomic<std::uint64_t> calls{0};           // LinkStore calls (read while the agent runs on)
  // The death phase (the victim only).
  std::optional<Clock::time_point> last_refresh;  // its last keep_alive returned
  std::optional<Clock::time_point> died;          // it stopped refreshing, or started its revoke
};

struct AgentSettings {
  int n = 0;
  std::uint16_t port = 0;
  milliseconds node_timeout{};
  milliseconds reply_timeout{};
  milliseconds poll{0};
  bool waiting_keep_alive = true;
};

// Starts the agents, the coordinator having been elected; stops them (and joins their threads)
// when it goes.
class Agents {
 public:
  Agents(const AgentSettings& s, Control& ctl);
  ~Agents();
  Agents(const Agents&) = delete;
  Agents& operator=(const Agents&) = delete;
  void join();
  const std::vector<AgentResult>& results() const { return m_results; }

 private:
  Control& m_ctl;
  std::vector<AgentResult> m_results;
  std::vector<std::thread> m_threads;
};

// Waits until `field` (under ctl.mutex) reaches n; false after `timeout`.
bool wait_count(Control& ctl, int& field, int n, milliseconds timeout);

int count_of(Control& ctl, const int& field);

/// Moves the agents on to `stage` (1: grant the lease; 2: join).
void set_stage(Control& ctl, int stage);

/// Writes `key` (the stop notice) with a client of its own.
void write_key(std::uint16_t port, const std::string& key, const std::string& value);

/// The first error of the agents that got no usable round; their count in `*failed`.
std::string first_error(const std::vector<AgentResult>& results, int* failed);

}  // namespace rankrun::bench::etcd_bench
