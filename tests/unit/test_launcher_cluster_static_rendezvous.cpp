// cluster/static_rendezvous: the static rendezvous's steps, several nodes on one fake store.

#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "cluster_fixtures.hpp"
#include "fake_link_store.hpp"
#include "launcher/cluster/static_rendezvous.hpp"

using namespace rankrun::launcher;
using namespace rankrun::launcher::cluster;
using namespace std::chrono_literals;
using rankrun::launcher::testing::FakeStoreHost;
using Clock = std::chrono::steady_clock;
using rankrun::launcher::testing::node;

namespace {

bool never() { return false; }

void quiet(const std::string&) {}

template <typename T>
RendezvousFailure failure_of(const T& result) {
  REQUIRE(std::holds_alternative<RendezvousFailure>(result));
  return std::get<RendezvousFailure>(result);
}

}  // namespace

TEST_CASE("static rendezvous: three nodes claim their ranks, the last completes it, each reads the same map") {
  FakeStoreHost host;
  auto a = host.client("10.0.0.1");
  auto b = host.client("10.0.0.2");
  auto c = host.client("10.0.0.3");
  // They arrive in any order; the map is by node rank.
  CHECK_FALSE(claim_node_rank(*c, node("10.0.0.3", {.node_rank = 2, .nproc = 1}), 3));
  CHECK_FALSE(claim_node_rank(*a, node("10.0.0.1", {.node_rank = 0}), 3));
  CHECK_FALSE(host.value(k_complete_key));
  CHECK_FALSE(claim_node_rank(*b, node("10.0.0.2", {.node_rank = 1, .nproc = 4}), 3));
  CHECK(host.value(k_complete_key) == "ok");
  CHECK(host.value(k_roster_key) == "2,0,1,");
  CHECK(host.value(k_arrived_key) == "3");

  for (auto* client : {a.get(), b.get(), c.get()}) {
    const auto complete = wait_for_completion(*client, 3, 900s, Clock::now() + 900s, never, quiet);
    CHECK(std::holds_alternative<Complete>(complete));
    auto map = read_node_map(*client, 3);
    REQUIRE(std::holds_alternative<NodeMap>(map));
    const auto& m = std::get<NodeMap>(map);
    CHECK(m.world_size == 7);
    REQUIRE(m.nodes.size() == 3);
    CHECK(m.nodes[0].host == "10.0.0.1");
    CHECK(m.nodes[0].first_rank == 0);
    CHECK(m.nodes[1].host == "10.0.0.2");
    CHECK(m.nodes[1].first_rank == 2);
    CHECK(m.nodes[2].host == "10.0.0.3");
    CHECK(m.nodes[2].first_rank == 6);
    CHECK(m.node_of_rank(5)->node_rank == 1);
  }
}

TEST_CASE("static rendezvous: three nodes at once, each on its own thread, all get the map") {
  FakeStoreHost host;
  std::vector<StepResult<NodeMap>> results(3);
  std::vector<std::thread> threads;
  for (int i = 0; i < 3; ++i) {
    threads.emplace_back([&, i] {
      const auto host_name = "10.0.0." + std::to_string(i + 1);
      auto client = host.client(host_name);
      results[static_cast<std::size_t>(i)] =
          static_rendezvous(*client, node(host_name, {.node_rank = i}), 3, 10s, never, quiet);
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& r : results) {
    REQUIRE(std::holds_alternative<NodeMap>(r));
    CHECK(std::get<NodeMap>(r).world_size == 6);
    CHECK(std::get<NodeMap>(r).nodes[2].first_rank == 4);
  }
}

TEST_CASE("static rendezvous: a rank claimed twice is refused, naming both hosts, and the waiting nodes learn it") {
  FakeStoreHost host;
  auto a = host.client("10.0.0.1");
  auto b = host.client("10.0.0.2");
  auto twin = host.client("10.0.0.9");
  CHECK_FALSE(claim_node_rank(*a, node("10.0.0.1", {.node_rank = 0}), 3));
  CHECK_FALSE(claim_node_rank(*b, node("10.0.0.2", {.node_rank = 1}), 3));
  const auto refused = claim_node_rank(*twin, node("10.0.0.9", {.node_rank = 1}), 3);
  REQUIRE(refused);
  CHECK(refused->end == EarlyEnd::Usage);
  const std::string message =
      "node rank 1 is claimed by two nodes: 10.0.0.2 (first) and 10.0.0.9; give every node its own --node-rank from 0 "
      "to 2";
  CHECK(refused->message == message);
  // The refused node is not counted, and the first claim stays.
  CHECK(host.value(k_arrived_key) == "2");
  const auto first = host.value(node_key(1));
  REQUIRE(first);
  CHECK(decode_node(*first)->host == "10.0.0.2");
  // Node 0, waiting, learns it at once rather than at its timeout.
  const auto waited = failure_of(wait_for_completion(*a, 3, 900s, Clock::now() + 900s, never, quiet));
  CHECK(waited.end == EarlyEnd::RendezvousFailed);
  CHECK(waited.message == "the rendezvous was aborted: " + message);
}

TEST_CASE("static rendezvous: the timeout ends every waiting node with one message naming the missing nodes") {
  FakeStoreHost host;
  auto a = host.client("10.0.0.1");
  auto b = host.client("10.0.0.2");
  CHECK_FALSE(claim_node_rank(*a, node("10.0.0.1", {.node_rank = 0}), 3));
  CHECK_FALSE(claim_node_rank(*b, node("10.0.0.2", {.node_rank = 1}), 3));
  const auto timed_out = failure_of(wait_for_completion(*a, 3, 1500ms, Clock::now() + 20ms, never, quiet));
  CHECK(timed_out.end == EarlyEnd::RendezvousFailed);
  CHECK(
      timed_out.message ==
      "the rendezvous timed out after 1 s: 2 of 3 arrived (0,1); missing node 2; start rankrun on every node with the "
      "same --nnodes, --master-addr and --master-port, or raise --rdzv-conf timeout=");
  // Node 1 hears the same message (at once, not at its own timeout), and so does node 2 arriving
  // late.
  const auto heard = failure_of(wait_for_completion(*b, 3, 900s, Clock::now() + 2s, never, quiet));
  CHECK(heard.message == "the rendezvous was aborted: " + timed_out.message);
  auto c = host.client("10.0.0.3");
  const auto late = failure_of(static_rendezvous(*c, node("10.0.0.3", {.node_rank = 2}), 3, 900s, never, quiet));
  CHECK(late.message == "the rendezvous was aborted: " + timed_out.message);
  CHECK(host.value(k_complete_key)->rfind("abort\n", 0) == 0);
}

TEST_CASE(
    "static rendezvous: an abort (a node's Ctrl-C, a node that failed its checks) ends it; after completion it is too late") {
  FakeStoreHost host;
  auto a = host.client("10.0.0.1");
  auto b = host.client("10.0.0.2");
  CHECK_FALSE(claim_node_rank(*a, node("10.0.0.1", {.node_rank = 0}), 2));
  CHECK(abort_rendezvous(*b, "node 10.0.0.2 was interrupted (SIGINT)") ==
        "abort\nnode 10.0.0.2 was interrupted (SIGINT)");
  // The first abort stays.
  CHECK(abort_rendezvous(*b, "a second one") == "abort\nnode 10.0.0.2 was interrupted (SIGINT)");
  const auto aborted = failure_of(wait_for_completion(*a, 2, 900s, Clock::now() + 900s, never, quiet));
  CHECK(aborted.end == EarlyEnd::RendezvousFailed);
  CHECK(aborted.message == "the rendezvous was aborted: node 10.0.0.2 was interrupted (SIGINT)");

  FakeStoreHost done;
  auto x = done.client("10.0.0.1");
  CHECK_FALSE(claim_node_rank(*x, node("10.0.0.1", {.node_rank = 0}), 1));
  CHECK(abort_rendezvous(*x, "too late") == "ok");
  CHECK(std::holds_alternative<Complete>(wait_for_completion(*x, 1, 900s, Clock::now() + 900s, never, quiet)));
}

TEST_CASE("static rendezvous: the waiting node prints who is missing, stops when told, and a bad map is a failure") {
  FakeStoreHost host;
  auto a = host.client("10.0.0.1");
  CHECK_FALSE(claim_node_rank(*a, node("10.0.0.1", {.node_rank = 0}), 2));
  // The first line after a second (then when it changes, or every 5 s); stopping is asked
  // after each wait.
  std::vector<std::string> said;
  int polls = 0;
  const auto stopped = wait_for_completion(
      *a, 2, 900s, Clock::now() + 1200ms, [&] { return ++polls > 1; },
      [&](const std::string& line) { said.push_back(line); });
  CHECK(std::holds_alternative<Stopped>(stopped));
  CHECK(polls == 2);
  REQUIRE(said.size() == 1);
  CHECK(said[0] == "waiting for nodes: 1 of 2 arrived (0); missing node 1; 0 s left");

  // Nodes that disagree on --rdzv-id: complete, but no map.
  auto b = host.client("10.0.0.2");
  CHECK_FALSE(claim_node_rank(*b, node("10.0.0.2", {.node_rank = 1, .run_id = "other-job"}), 2));
  const auto bad = failure_of(read_node_map(*b, 2));
  CHECK(bad.end == EarlyEnd::RendezvousFailed);
  CHECK(bad.message.find("node 1 (10.0.0.2) runs --rdzv-id=other-job but node 0 (10.0.0.1) runs --rdzv-id=job") == 0);
}

TEST_CASE("static rendezvous: a store host lost in the middle of a step throws StoreError") {
  FakeStoreHost host;
  auto a = host.client("10.0.0.1");
  host.lose_after(2);  // the claim and the roster go through, the count does not
  CHECK_THROWS_AS(claim_node_rank(*a, node("10.0.0.1", {.node_rank = 0}), 2), rankrun::rendezvous::StoreError);
  CHECK(host.value(k_roster_key) == "0,");
  CHECK_FALSE(host.value(k_arrived_key));

  // Lost while the node waits: the wait ends with the error, not at the timeout.
  FakeStoreHost other;
  auto b = other.client("10.0.0.2");
  CHECK_FALSE(claim_node_rank(*b, node("10.0.0.2", {.node_rank = 0}), 2));
  std::thread lose([&] {
    while (other.pending_waits() == 0) std::this_thread::sleep_for(1ms);
    other.lose_after(0);
  });
  const auto started = Clock::now();
  CHECK_THROWS_AS(wait_for_completion(*b, 2, 900s, Clock::now() + 900s, never, quiet), rankrun::rendezvous::StoreError);
  lose.join();
  CHECK(Clock::now() - started < 900ms);
}

TEST_CASE("static rendezvous: a node of another rankrun version is named as such, not as a missing node") {
  FakeStoreHost host;
  auto a = host.client("10.0.0.1");
  CHECK_FALSE(claim_node_rank(*a, node("10.0.0.1", {.node_rank = 0}), 2));
  // Node 1 runs a release whose records were "rankrun-node/1" lines.
  auto old = host.client("10.0.0.2");
  CHECK(old->compare_set(node_key(1), "", "rankrun-node/1\nnode_rank=1\nhost=10.0.0.2\nnproc=2\nrun_id=job\n") ==
        "rankrun-node/1\nnode_rank=1\nhost=10.0.0.2\nnproc=2\nrun_id=job\n");
  const auto bad = failure_of(read_node_map(*a, 2));
  CHECK(bad.end == EarlyEnd::RendezvousFailed);
  CHECK(bad.message.find("a node runs an older rankrun: its record is 'rankrun-node/1' (version 1)") == 0);
  CHECK(bad.message.find("run the same rankrun version on every node") != std::string::npos);
}
