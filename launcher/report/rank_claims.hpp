#pragma once
// Which rank each worker registered as in init_process_group, read from the keys it SETs in
// the store, and the first rank that two workers registered. Pure: the store watch feeds it
// (local rank, key) pairs once it knows which worker a connection is.
//
// The keys that register rank R in the default group, as rankrun's store sees them (torch's
// PrefixStores join with '/', its TCPStore client adds a leading '/'; torch 1.13 under a
// launcher's store adds "/worker/attempt_N"):
//
//   torch 1.13, gloo        //worker/attempt_0/default_pg/0/0/rank_R   (the host name, for
//                           //worker/attempt_0/default_pg/0/0/R         gloo's local ranks; then
//                                                                       the pairs' addresses)
//   torch 2.6 and 2.14,     /default_pg/0//cpu//0/R
//   gloo
//   NCCL (from the sources, .../default_pg/0/N (1.13), .../default_pg/0//cuda//N (2.x): the
//   not seen run here)      communicator's unique id, SET by rank 0 alone; N counts the
//                           communicators, so the first one's key reads as rank 0
//
// The other ranks only wait for these keys and read them: no two processes SET the same one
// unless they registered the same rank. A key counts when a "default_pg/" segment is followed
// by the group's name and at least one more segment, and its last segment is R or rank_R. The
// key less its last segment is the registration's scope (one process group's backend): a
// process's rank_R and R are one registration. Another process group than the default one
// registers its group ranks, named with the group.

#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace rankrun::launcher {

/// A key that registers a rank: its scope (the key less its last segment), the process group's
/// name in the store ("0": the default group) and the rank.
struct RankRegistration {
  std::string scope;
  std::string group;
  int rank = -1;
};

/// `key` registers a rank (see above), or not.
std::optional<RankRegistration> rank_registration(std::string_view key);

/// Two workers registered the same rank in one process group.
struct DuplicateRank {
  std::string group;  // the process group's name in the store; "0" is the default group
  int rank = -1;      // the rank both registered (a rank of that group)
  int first = -1;     // the local rank that registered it first
  int second = -1;    // the local rank that registered it too
  /// The ranks rankrun gave these two workers that no worker had registered then (default
  /// group only: another group's ranks are not the ones rankrun gave).
  std::vector<int> unregistered;

  bool default_group() const { return group == "0"; }
};

class RankClaims {
 public:
  /// `ranks`: the global rank rankrun gave each local rank.
  explicit RankClaims(std::vector<int> ranks = {});

  /// Local rank `local_rank` SET `key`. Returns the duplicate it reveals, only the first one.
  std::optional<DuplicateRank> on_set(int local_rank, std::string_view key);
  /// The duplicate found, if any.
  const std::optional<DuplicateRank>& duplicate() const { return m_duplicate; }

 private:
  std::vector<int> m_ranks;
  // scope -> rank -> the local rank that registered it first
  std::unordered_map<std::string, std::unordered_map<int, int>> m_owner;
  std::optional<DuplicateRank> m_duplicate;
};

/// What to say when two workers registered the same rank, for the log: both pids with their
/// local ranks, the rank left unregistered, and the fix for a script that reads --local_rank.
std::string describe_duplicate(const DuplicateRank& d, long first_pid, long second_pid);

}  // namespace rankrun::launcher
