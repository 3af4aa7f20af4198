#pragma once
// What the nodes of a multi-node job tell each other through the store, and what they make of
// it. Pure: the records' text form (bounded), the node map (which node runs which global ranks),
// and the lines rankrun prints about them.
//
// The agents' keys live in their own key space (k_agents_key_space) of the store node 0 hosts:
//   node/<r>             NodeRecord of node rank r, claimed with compare-and-set (one owner)
//   rdzv/roster          the node ranks that arrived, appended as "r,"
//   rdzv/arrived         a counter; the node that makes it nnodes sets rdzv/complete
//   rdzv/complete        "ok", or "abort\n<message>" when the rendezvous cannot complete
//   lease/<r>            refreshed every lease interval by node r (the store host watches it)
//   stop/<attempt>       StopNotice: how the attempt ends for every node: the first failure,
//                        signal, hang or node loss, or success once every node's ranks exited 0
//   attempt/<k>/done/<r> node r's ranks all exited 0 in attempt k (the store host then
//                        publishes the success notice)
//   attempt/<k>/ready/<r>, attempt/<k>/open   the barrier before restart k starts its workers
//   final/<r>            NodeFinal: node r's result, once its workers are gone
//   progress/<k>/<r>     NodeProgress (progress.hpp): node r's ranks in attempt k, for the node
//                        that decides the collectives' hangs for the whole job
//
// An elastic job (--rdzv-backend=c10d, --nnodes=MIN:MAX) forms rounds instead of the static
// rendezvous; the store host keeps them (rounds.hpp) and every node has keys of its own:
//   join/<instance>      NodeRecord of a node asking for the next round (node_rank: its rank in
//                        the round before, or -1)
//   assign/<instance>    the store host's answer: the round's number, or "abort\n<message>"
//                        (the round cannot form), or "closed\n<message>" (the job is over)
//   spare/<instance>     set while the node waits as a spare (the job has its MAX nodes)
//   rdzv/status          the forming round's waiting line, for the nodes to print
//   round/<k>/map/<p>    page p of round k's map (encode_pages): the members in node rank order
//   round/<k>/lease/<r>  node r's lease in round k (instead of lease/<r>)

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "launcher/types/exit_code.hpp"
#include "launcher/types/exit_status.hpp"
#include "launcher/types/error_record.hpp"

namespace rankrun::launcher::cluster {

inline constexpr const char* k_agents_key_space = "rankrun-agents";
/// Bound on any record read from the store (a record is a few hundred bytes; a stop notice
/// carries at most a few KiB of stderr and error text).
inline constexpr std::size_t k_max_record = 64 * 1024;

std::string node_key(int node_rank);
std::string lease_key(int node_rank);
std::string stop_key(int attempt);
std::string final_key(int node_rank);
std::string ready_key(int attempt, int node_rank);
std::string open_key(int attempt);
std::string done_key(int attempt, int node_rank);
/// {attempt, node rank} from "attempt/3/done/1"; nullopt otherwise.
std::optional<std::pair<int, int>> done_in_key(std::string_view key);
inline constexpr const char* k_roster_key = "rdzv/roster";
inline constexpr const char* k_arrived_key = "rdzv/arrived";
inline constexpr const char* k_complete_key = "rdzv/complete";

/// The id of an attempt in the keys above (stop/<id>, attempt/<id>/...): a static job's attempt
/// itself (round < 0); in an elastic job round * 1000 + the attempt within the round, the same on
/// every node of the round however many attempts each node saw before it joined.
int attempt_id(int round, int attempt_in_round);
inline constexpr int k_max_attempts_per_round = 1000;

std::string join_key(std::string_view instance);
std::string assign_key(std::string_view instance);
std::string spare_key(std::string_view instance);
std::string round_map_key(int round, int page);
/// "round/3/lease/" (elastic) or "lease/" (static, round < 0): the prefix of the lease keys.
std::string lease_prefix(int round);
inline constexpr const char* k_status_key = "rdzv/status";
/// The job is over ("closed\n<message>", or "abort\n<message>" when its first round failed):
/// written once by the coordinator, read by a coordinator that takes over (etcd).
inline constexpr const char* k_closed_key = "rdzv/closed";
/// The instance in "join/<instance>"; nullopt otherwise.
std::optional<std::string> instance_in_join_key(std::string_view key);

/// The node rank in "lease/3" or "final/3" (with `prefix` "lease/"); nullopt otherwise.
std::optional<int> node_in_key(std::string_view key, std::string_view prefix);

/// One node as it announces itself.
struct NodeRecord {
  int node_rank = 0;
  std::string host;      // the address the store host sees it at, or --local-addr
  int nproc = 1;         // its local world size (nodes may differ)
  std::string run_id;    // --rdzv-id: every node must give the same
  std::string instance;  // unique per rankrun process: tells a duplicate from a reconnect
};
std::string encode(const NodeRecord& r);
std::optional<NodeRecord> decode_node(std::string_view text);

/// One node's place in the job.
struct NodeSpan {
  int node_rank = 0;
  std::string host;
  int nproc = 1;
  int first_rank = 0;  // global rank of its local rank 0
};

/// Every node of the job, by node rank, with contiguous global rank ranges.
struct NodeMap {
  std::vector<NodeSpan> nodes;
  int world_size = 0;
  /// The node that runs global rank `rank`; nullptr when none does.
  const NodeSpan* node_of_rank(int rank) const;
};

/// The map from the records of node ranks 0..N-1 (any order). Throws std::invalid_argument,
/// naming the nodes, when a rank is missing or twice, or the nodes disagree on the run id.
NodeMap plan_nodes(std::vector<NodeRecord> records, int nnodes);

/// "ranks 8-15", or "rank 8" for a node of one.
std::string ranks_of(const NodeSpan& node);
/// "node 1 10.0.0.2: ranks 8-15\n" per node.
std::string format_node_map(const NodeMap& map);

/// The progress line while nodes arrive: "waiting for nodes: 2 of 3 arrived (0, 1); missing
/// node 2; 893 s left". `arrived` lists node ranks; duplicates are ignored.
std::string format_waiting(const std::vector<int>& arrived, int nnodes, double seconds_left);
/// Node ranks 0..nnodes-1 that are not in `arrived`.
std::vector<int> missing_nodes(const std::vector<int>& arrived, int nnodes);
/// "0,1," (rdzv/roster) -> {0, 1}; garbage entries are skipped.
std::vector<int> parse_roster(std::string_view text);

/// Why an attempt of the job is stopping, as every node learns it.
/// Membership: an elastic job's nodes changed (a node was lost, or one arrived with room under
/// MAX): every node stops its workers and joins the next round; --max-restarts is not used up.
/// Internal: rankrun on a node could not go on (its message in `report`).
enum class StopKind { Failure, Signal, Hang, NodeLost, Success, Membership, Internal };

struct StopNotice {
  StopKind kind = StopKind::Failure;
  int node_rank = 0;  // where it happened (the lost node, for NodeLost)
  std::string host;
  // Failure: the root-cause worker.
  int rank = -1;
  int local_rank = -1;
  ExitStatus status;
  std::vector<std::string> stderr_tail;  // last lines, oldest first
  std::optional<ErrorRecord> error;
  std::string error_file;  // on its node
  // The root-cause rank's own time: milliseconds from its start to its failure, by its node's
  // clock alone (no two hosts' clocks are compared); -1: unknown. `ms_exact` false: the latest
  // it can have been (its node saw it late).
  int ms = -1;
  bool ms_exact = true;
  int signo = 0;             // Signal
  bool preempted = false;    // Signal: it followed the --preempt-signal
  std::string ranks;         // NodeLost: "ranks 4-5"
  bool restartable = false;  // a worker failure: --max-restarts may restart the job
  std::string why;           // Membership: "node 10.0.0.3 lost", "node 10.0.0.4 joined"
  int next_round = 0;        // Membership: the round that follows
  int next_nodes = 0;        // Membership: the nodes expected in it
  std::string report;        // Hang: its HANG line and verdict, as the node that found it printed them;
                             // Internal: what rankrun could not do

  /// Every node's exit code for this notice.
  int exit_code() const;
  /// One line: "rank 4 (local 0) on node 2 (10.0.0.3) exited with code 3".
  std::string describe() const;
};
/// Bounded: the stderr tail and the error text are cut so that the record stays under
/// k_max_record.
std::string encode(const StopNotice& n);
std::optional<StopNotice> decode_notice(std::string_view text);

/// One round of an elastic job: its members with their node ranks.
struct RoundRecord {
  int round = 0;
  std::vector<NodeRecord> members;
};
/// Round k's map as the nodes read it: pages (round/<k>/map/<p>) of whole members, in node rank
/// order, each page under k_max_record / 2 whatever the round's size. A page holds only what a
/// node needs from the others (host and nproc; the run id once): about 20 bytes a node.
std::vector<std::string> encode_pages(const RoundRecord& r);
/// The members of `pages`, in order, with their node ranks; nullopt when a page is unreadable,
/// of another round, out of order, or the members disagree with `count`.
std::optional<RoundRecord> decode_pages(const std::vector<std::string>& pages, int round, int count);

/// The store host's answer to one node's join (assign/<instance>): its round, its node rank in
/// it, the round's size and how many pages its map has.
struct Assignment {
  int round = 0;
  int node_rank = 0;
  int nodes = 0;
  int pages = 0;
};
std::string encode(const Assignment& a);
std::optional<Assignment> decode_assignment(std::string_view text);

/// Host names as people sort them: digit runs compare as numbers ("node2" < "node10",
/// "10.0.0.2" < "10.0.0.10").
bool natural_less(std::string_view a, std::string_view b);

/// A node's result, sent to the store host for the job-wide summary.
struct NodeFinal {
  int node_rank = 0;
  std::string host;
  int exit_code = 0;
  std::vector<std::string> rows;  // "rank 2 (local 0, pid 41): exit 0"
};
std::string encode(const NodeFinal& f);
std::optional<NodeFinal> decode_final(std::string_view text);

/// Why `text` cannot be read when it is a record of another rankrun version (a node that runs
/// another release): a message that says so and how to fix it; nullopt for anything else (a
/// record of this version, or what is no record at all).
std::optional<std::string> foreign_record(std::string_view text);

/// The store host's job-wide summary: every rank of every node with its result, and the nodes
/// that were lost (by node rank, from `map`).
std::string format_job_summary(const NodeMap& map, const std::vector<NodeFinal>& finals, const std::vector<int>& lost,
                               int exit_code);

}  // namespace rankrun::launcher::cluster
