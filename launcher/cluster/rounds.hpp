#pragma once
// The rounds of an elastic job (--nnodes=MIN:MAX), as the store host keeps them. Pure: the
// host's RoundHost feeds it the nodes that ask to join, the nodes that are lost and the time,
// and writes out what it decides.
//
//   Forming(k) ── MIN joined ──▶ last call (last_call_timeout)
//       │  closes at MAX, when the last call ends, or at once when every node of the round
//       │  before that is still alive has joined again
//       │  fails when MIN have not joined within join_timeout (the message names who came)
//       ▼
//   Running(k) ── a member lost, or a new node with room under MAX ──▶ Forming(k+1)
//       │  a new node beyond MAX waits as a spare (it is told so)
//       ▼
//   Closed: the job is over; every waiting node and every late one is told so
//
// Node ranks: a node keeps its rank when it can; the others take the free ranks in natural
// host order. Nothing here grows with anything but the nodes that joined.

#include <chrono>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "launcher/cluster/records.hpp"

namespace rankrun::launcher::cluster {

struct RoundRules {
  int min_nodes = 1;
  int max_nodes = 1;
  std::chrono::milliseconds last_call{std::chrono::seconds(30)};
  std::chrono::milliseconds join_timeout{std::chrono::seconds(600)};
};

/// What the store host must write after an event; empty parts: nothing to do.
struct RoundStep {
  std::optional<RoundRecord> closed;                         // a round closed: its map, and assign/ for each member
  std::vector<std::string> new_spares;                       // instances that now wait as spares: spare/ for each
  std::optional<std::string> restart;                        // the running round must end: why ("node 10.0.0.3 lost")
  std::optional<std::string> abort;                          // the forming round failed: every waiting node is told
  std::vector<std::pair<std::string, std::string>> refused;  // instance, message (a wrong --rdzv-id)
  std::vector<std::string> told_closed;  // instances told that the job is over (or, with abort, that
                                         // the round failed)
};

/// Node ranks for `members`: `previous` ranks are kept when they are below the round's size
/// and not taken twice; the others fill the free ranks in natural host order.
std::vector<NodeRecord> assign_ranks(std::vector<NodeRecord> members);

class RoundKeeper {
 public:
  using Clock = std::chrono::steady_clock;
  RoundKeeper(RoundRules rules, Clock::time_point now);

  /// A node asks for the next round (a new one, a rejoining member, or a spare asking again).
  RoundStep join(NodeRecord node, Clock::time_point now);
  /// A node that asked to join and has no place in a round yet went away (its connection
  /// closed): it is not counted, and no round waits for it.
  RoundStep leave(const std::string& instance, Clock::time_point now);
  /// A member of the running round is lost (node rank in that round). While the next round
  /// forms: a member of the round before (its rank there) that died before it joined again is
  /// no longer waited for; one that joined again is alive, whatever its old lease says.
  RoundStep lost(int node_rank, Clock::time_point now);
  /// While the next round forms: the member `node_rank` of the round before has joined it
  /// already (its old lease lapsing then is no loss).
  bool rejoined(int node_rank) const;
  /// Deadlines: the last call, join_timeout.
  RoundStep tick(Clock::time_point now);
  /// The job is over: the waiting nodes, and every later one, are told so.
  RoundStep close_job();
  /// Another keeper ran the job until now (etcd: its coordinator was lost): round `round` runs
  /// with `members` (by node rank); what this keeper knew is replaced.
  void resume(int round, std::vector<NodeRecord> members, Clock::time_point now);

  /// When tick() must run next; nullopt: no deadline pending.
  std::optional<Clock::time_point> next_deadline() const;
  /// The forming round's line: "round 1: 2 of 2-3 nodes (10.0.0.1, 10.0.0.2); last call, 25 s
  /// left"; empty when no round is forming.
  std::string status(Clock::time_point now) const;

  /// Forming: how many nodes the round should have (the last round's survivors and the nodes
  /// already waiting, at most MAX).
  int expected_nodes() const;
  bool forming() const { return m_state == State::Forming; }
  bool running() const { return m_state == State::Running; }
  bool closed() const { return m_state == State::Closed; }
  int round() const { return m_round; }
  /// The running round's members, by node rank.
  const std::vector<NodeRecord>& members() const { return m_members; }
  /// Every round that closed: "round 0: 3 nodes (world 6)", for the final report.
  const std::vector<std::string>& history() const { return m_history; }

 private:
  enum class State { Forming, Running, Closed };
  void begin_forming(int round, std::set<std::string> expected, Clock::time_point now);
  void evaluate(Clock::time_point now, RoundStep& step);
  std::string joined_hosts() const;
  std::string nodes_text() const;

  RoundRules m_rules;
  State m_state = State::Forming;
  int m_round = 0;
  std::vector<NodeRecord> m_joined;  // forming: in join order (node_rank: the rank before)
  std::set<std::string> m_expected;  // forming: the last round's surviving members
  Clock::time_point m_started;
  std::optional<Clock::time_point> m_min_at;  // when MIN had joined: the last call runs from here
  std::vector<NodeRecord> m_members;          // running
  std::vector<NodeRecord> m_previous;         // forming: the members of the round before
  std::set<std::string> m_spares_told;
  std::string m_run_id;  // the first node's --rdzv-id
  std::vector<std::string> m_history;
};

}  // namespace rankrun::launcher::cluster
