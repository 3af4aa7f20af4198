#pragma once
// An elastic job's join (--nnodes=MIN:MAX, c10d or etcd), one node's steps on its connection to
// the agents' key space (records.hpp names the keys): announce itself (join/<instance>), wait
// for the store host's answer (assign/<instance>) with the waiting node's own traffic in
// between, read the round's map pages. No threads: NodeLink's watcher runs them (and the
// benchmarks do, with many nodes).

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <variant>

#include "launcher/cluster/link_step.hpp"
#include "launcher/cluster/link_store.hpp"
#include "launcher/cluster/records.hpp"

namespace rankrun::launcher::cluster {

/// The store host's answer to one elastic join.
struct JoinAnswer {
  enum class Kind { Round, Abort, Closed, Unreadable } kind = Kind::Unreadable;
  std::string message;  // Abort, Closed, Unreadable
  RoundRecord round;    // Round: the round this node is in, by node rank
  int node_rank = -1;   // Round: this node's
};
/// One elastic join on `client` (agents' key space): announces `me` (join/<instance>) and waits
/// for the store host's assign/<instance>. `waiting` runs every `poll` while there is no answer
/// (to print progress); it returns false to give up (the answer is then Unreadable, "stopped").
/// Throws rendezvous::StoreError when the store host is gone.
/// `lease` (etcd; 0: none): the join is attached to it, and goes when it lapses.
/// `state` carries one join across its tries: a try on a fresh connection after a lost one
/// (the caller's retry) does not delete the answer the store host may have given meanwhile.
struct JoinState {
  bool cleared = false;  // the answer left from the round before is gone
};
JoinAnswer join_round(LinkStore& client, const NodeRecord& me, const std::function<bool(LinkStore&)>& waiting,
                      std::chrono::milliseconds poll, std::int64_t lease, JoinState& state);
/// A join in one try.
inline JoinAnswer join_round(LinkStore& client, const NodeRecord& me, const std::function<bool(LinkStore&)>& waiting,
                             std::chrono::milliseconds poll, std::int64_t lease = 0) {
  JoinState state;
  return join_round(client, me, waiting, poll, lease, state);
}

/// The store traffic of a node waiting for its join's answer, once per poll: `lease` (etcd; 0:
/// none) renewed once every `keep_every` (a spare waits for the whole job, its join must not
/// lapse), the spare notice read once, the round's waiting line (rdzv/status) read.
class JoinProgress {
 public:
  JoinProgress(std::string instance, std::int64_t lease, std::chrono::milliseconds keep_every);
  /// join_round's poll: once a lease interval with etcd (each wait is a watch opened on etcd: at
  /// thousands of waiting nodes, etcd's gateway is what a round's close has to get through),
  /// every second otherwise.
  std::chrono::milliseconds poll() const;
  /// One poll's traffic, and what to print through `say`: the spare notice (once), or the
  /// waiting line ("waiting for nodes: ...") when it changed and every few seconds (never after
  /// the spare notice).
  void step(LinkStore& client, const Say& say);

 private:
  using Clock = std::chrono::steady_clock;
  std::string m_instance;
  std::int64_t m_lease = 0;
  std::chrono::milliseconds m_keep_every;
  Clock::time_point m_next_keep;
  Clock::time_point m_next_progress;
  bool m_spare_told = false;
  std::string m_last_line;
};

/// etcd: the node's lease for its next join: `current` renewed, or a new one of `ttl` when there
/// is none yet or it lapsed (the job counted the node as lost). 0 where the store has no leases.
std::int64_t renew_or_grant(LinkStore& client, std::int64_t current, std::chrono::milliseconds ttl);

/// A round this node is in, as the Job hears of it.
struct JoinedRound {
  NodeMap map;
  int node_rank = 0;
  int round = 0;
};
/// What an answer means for the node: its round and map, or why it exits: the job is closed
/// (k_exit_rendezvous_closed, "the rendezvous is closed: ..."), the round could not form or the
/// answer is not readable (k_exit_rendezvous), or its members do not make a map.
std::variant<JoinedRound, RendezvousFailure> joined_round(const JoinAnswer& answer);

}  // namespace rankrun::launcher::cluster
