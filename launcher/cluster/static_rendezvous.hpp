#pragma once
// The static rendezvous (--nnodes=N with --node-rank), one node's steps on its connection to the
// agents' key space (records.hpp names the keys): claim node/<rank>, wait until every node has,
// read the node map. No threads: NodeLink's watcher runs them and posts what they return.

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <variant>

#include "launcher/cluster/link_step.hpp"
#include "launcher/cluster/link_store.hpp"
#include "launcher/cluster/records.hpp"

namespace rankrun::launcher::cluster {

/// The rendezvous is complete (rdzv/complete is "ok").
struct Complete {};

/// Claims node/<me.node_rank> (compare-and-set: one owner) and counts this node in: its rank on
/// rdzv/roster, rdzv/arrived + 1; the node that makes the count `nnodes` sets rdzv/complete to
/// "ok". A rank another node claimed first ends the rendezvous for every node (abort_rendezvous)
/// and comes back as the failure (k_exit_usage), naming both hosts; nullopt: claimed.
std::optional<RendezvousFailure> claim_node_rank(LinkStore& client, const NodeRecord& me, int nnodes);

/// Waits for rdzv/complete, printing the waiting line through `say` when it changes and every
/// few seconds. At `deadline` (the rendezvous timeout, `timeout`, after the node began) the node
/// ends the rendezvous for every node with the timeout's message, unless it completed meanwhile.
/// A failure: timed out (k_exit_rendezvous), or aborted by any node ("the rendezvous was aborted:
/// ..."); Stopped: `stopping` said so between two waits.
StepResult<Complete> wait_for_completion(LinkStore& client, int nnodes, std::chrono::milliseconds timeout,
                                         std::chrono::steady_clock::time_point deadline,
                                         const std::function<bool()>& stopping, const Say& say);

/// The node map from node/0..node/<nnodes-1>, once the rendezvous is complete; a failure
/// (k_exit_rendezvous) when the records do not make one (plan_nodes' message).
std::variant<NodeMap, RendezvousFailure> read_node_map(LinkStore& client, int nnodes);

/// The three steps in order, the deadline `timeout` from now.
StepResult<NodeMap> static_rendezvous(LinkStore& client, const NodeRecord& me, int nnodes,
                                      std::chrono::milliseconds timeout, const std::function<bool()>& stopping,
                                      const Say& say);

/// Ends the rendezvous for every node with `message` (compare-and-set of rdzv/complete to
/// "abort\n<message>"), unless it already ended. Returns rdzv/complete as it now is: "ok" when
/// the rendezvous completed first, the first abort's otherwise.
std::string abort_rendezvous(LinkStore& client, const std::string& message);

}  // namespace rankrun::launcher::cluster
