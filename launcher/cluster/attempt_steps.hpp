#pragma once
// A node's steps while the job runs, each on one connection to the agents' key space
// (records.hpp names the keys), without threads: refresh the node's lease and watch the
// attempt's stop notice a lease interval at a time, publish a notice, say the attempt is done,
// the restart barrier, open an attempt, send the node's final result. NodeLink's watcher and
// commander run them; the benchmarks run them for many nodes.

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "launcher/cluster/link_step.hpp"
#include "launcher/cluster/link_store.hpp"
#include "launcher/cluster/records.hpp"

namespace rankrun::launcher::cluster {

/// How often a node refreshes its lease for a given --node-timeout: five times per timeout,
/// between 0.2 s and 3 s.
std::chrono::milliseconds lease_interval(std::chrono::milliseconds node_timeout);

/// How long a node waits for one reply of the store host (or etcd) before it takes the
/// connection for gone: a third of --node-timeout, at least 0.3 s.
std::chrono::milliseconds reply_timeout(std::chrono::milliseconds node_timeout);

/// How long one try to connect again may take (the TCP handshake and the store's: two round
/// trips) when `left` remains of --node-timeout: as long as a reply may take, so that a slow
/// link's round trips fit, but no longer than what is left, and at least 0.2 s.
std::chrono::milliseconds reconnect_try(std::chrono::milliseconds node_timeout, std::chrono::milliseconds left);

/// A running node's lease: its key (lease/<r>, or round/<k>/lease/<r>) and, where the store
/// has leases (etcd), the node's lease the key goes with.
struct NodeLease {
  std::string key;
  std::int64_t granted = 0;
  std::uint64_t beats = 0;  // refreshes so far
};
/// One refresh. The TCP store: a SET of the key to the number of refreshes (the store host
/// times it, LeaseWatch). etcd: the key put with the node's lease the first time, the lease
/// kept alive afterwards.
void refresh_lease(LinkStore& client, NodeLease& lease);

/// What one wait for an attempt's stop notice saw.
struct NoticeWait {
  bool published = false;            // stop/<attempt> is set
  std::optional<StopNotice> notice;  // when it is readable
};
/// Waits up to `interval` for stop/<attempt>, and reads it when it comes.
NoticeWait await_notice(LinkStore& client, int attempt, std::chrono::milliseconds interval);
/// A watching node's lease interval: refresh_lease, then await_notice.
NoticeWait watch_interval(LinkStore& client, NodeLease& lease, int attempt, std::chrono::milliseconds interval);

/// Compare-and-set of stop/<attempt>: the first notice wins. Returns the winner (this one or
/// the one published before); nullopt when the stored notice is not readable.
std::optional<StopNotice> publish_stop(LinkStore& client, int attempt, const StopNotice& notice);

/// Node `node_rank`'s ranks all exited 0 in `attempt`.
void attempt_done(LinkStore& client, int attempt, int node_rank);

/// How long one wait of the restart barrier lasts: between two, the barrier checks whether the
/// attempt was stopped and lets the node send what it must (`between`).
inline constexpr std::chrono::milliseconds k_barrier_slice{250};

/// The restart barrier before `attempt` starts its workers: node `node_rank` is ready; then the
/// coordinator waits for all `nnodes` nodes to be ready, the others for the coordinator to open
/// the attempt. Returns the value the attempt was opened with (the coordinator: empty); the
/// failure (k_exit_rendezvous) when that did not happen within `timeout`; Stopped when the
/// attempt's stop notice was published meanwhile (a node lost at the barrier, a signal: the
/// notice, which the node's watch brings, decides) or `between` returned false. The wait goes
/// a `slice` at a time, and `between` runs after each slice that did not end it.
StepResult<std::string> ready_for(LinkStore& client, int attempt, int node_rank, int nnodes, bool coordinator,
                                  std::chrono::milliseconds timeout,
                                  const std::function<bool(LinkStore&)>& between = nullptr,
                                  std::chrono::milliseconds slice = k_barrier_slice);

/// The coordinator: `attempt`'s key space exists, the nodes may start its workers; `value`
/// (etcd: the workers' store, "host:port").
void open_attempt(LinkStore& client, int attempt, std::string_view value);

/// Node `node_rank`'s result for the store host's summary.
void publish_final(LinkStore& client, int node_rank, const NodeFinal& final_result);

}  // namespace rankrun::launcher::cluster
