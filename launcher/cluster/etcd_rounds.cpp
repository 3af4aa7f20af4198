#include "launcher/cluster/etcd_rounds.hpp"

#include "base/parse_number.hpp"

#include <map>
#include <set>
#include <spdlog/spdlog.h>

namespace rankrun::launcher::cluster {

std::optional<std::pair<int, int>> round_lease_in_key(std::string_view key) {
  constexpr std::string_view prefix = "round/";
  if (key.substr(0, prefix.size()) != prefix) return std::nullopt;
  key.remove_prefix(prefix.size());
  const auto slash = key.find("/lease/");
  if (slash == std::string_view::npos) return std::nullopt;
  int round = -1, node = -1;
  const auto r = key.substr(0, slash), n = key.substr(slash + 7);
  if (!parse_number(r, round) || round < 0 || !parse_number(n, node) || node < 0) return std::nullopt;
  return std::pair{round, node};
}

void take_over(EtcdCoordinator& etcd, RoundHost& rounds, LeaseWatch& leases) {
  leases.use_external_leases();
  leases.on_join(1, 0, k_agents_key_space);  // every change it is shown is a node's
  if (const auto closed = etcd.value(k_closed_key)) {
    const bool failed = closed->rfind("abort\n", 0) == 0;
    spdlog::info("this node coordinates the rounds; the job is over already");
    rounds.close_job(closed->substr(closed->find('\n') + 1), failed);
    // The nodes still waiting (a spare, this one perhaps) hear it now.
    for (const auto& [key, value] : etcd.keys("join/")) {
      const auto instance = key.substr(5);
      const auto answer = etcd.value(assign_key(instance)).value_or("");
      if (answer.rfind("closed\n", 0) != 0 && answer.rfind("abort\n", 0) != 0) rounds.joined(instance);
    }
    return;
  }
  // The last round any node was answered: its map (hosts by node rank), and the answers'
  // instances. A member lost already (the coordinator before, perhaps) is in the map still.
  std::optional<Assignment> last;
  std::map<int, std::string> instances;  // node rank -> instance, in the last round
  std::set<std::string> answered;        // members, and nodes told the job is over
  for (const auto& [key, value] : etcd.keys("assign/")) {
    const auto instance = key.substr(7);
    answered.insert(instance);
    const auto a = decode_assignment(value);
    if (!a) continue;
    if (!last || a->round > last->round) {
      last = a;
      instances.clear();
    }
    if (a->round == last->round) instances[a->node_rank] = instance;
  }
  int round = -1;
  int nodes = 0;
  std::vector<NodeRecord> members;
  if (last) {
    std::vector<std::string> pages;
    for (int p = 0; p < last->pages; ++p) pages.push_back(etcd.value(round_map_key(last->round, p)).value_or(""));
    if (auto map = decode_pages(pages, last->round, last->nodes)) {
      round = last->round;
      nodes = last->nodes;
      for (auto& m : map->members) {
        const auto it = instances.find(m.node_rank);
        // A member that asked for the next round already has no answer left: any name that no
        // join will match (the round it is in then closes at the last call, not at once).
        m.instance = it != instances.end() ? it->second
                                           : "round-" + std::to_string(round) + "-node-" + std::to_string(m.node_rank);
        members.push_back(std::move(m));
      }
    } else {
      spdlog::error("round {}'s map in etcd is not readable; starting the rounds afresh", last->round);
    }
  }
  if (round < 0) {
    spdlog::info("this node coordinates the rounds (elected in etcd)");
  } else {
    spdlog::warn(
        "this node coordinates the rounds from now on (the coordinator before it is gone): round {} runs "
        "with {} node{}",
        round, nodes, nodes == 1 ? "" : "s");
    rounds.resume(round, members);
    leases.start_round(nodes, lease_prefix(round));
    for (int r = 0; r < nodes; ++r) {
      if (!etcd.value(lease_prefix(round) + std::to_string(r))) leases.lapsed(r);
    }
  }
  for (const auto& [key, value] : etcd.keys("join/")) {
    const auto instance = key.substr(5);
    if (!answered.count(instance)) rounds.joined(instance);
  }
}

void feed(const rendezvous::EtcdEvent& e, RoundHost& rounds, LeaseWatch& leases) {
  if (e.key.rfind("join/", 0) == 0) {
    const auto instance = e.key.substr(5);
    if (e.deleted) {
      rounds.left(instance);
    } else {
      rounds.joined(instance);
    }
    return;
  }
  if (e.deleted) {
    // A member's lease lapsed (or it stopped and revoked it): lost, unless it sent its result.
    const auto lease = round_lease_in_key(e.key);
    const auto& keeper = rounds.keeper();
    if (lease && keeper.running() && lease->first == keeper.round()) leases.lapsed(lease->second);
    return;
  }
  leases.on_request(1, rendezvous::Op::Set, e.key);  // results and "all ranks exited 0"
}

}  // namespace rankrun::launcher::cluster
