#include <doctest/doctest.h>

#include "cluster_fixtures.hpp"
#include "launcher/cluster/rounds.hpp"

using namespace rankrun::launcher::cluster;
using namespace std::chrono_literals;
using Clock = RoundKeeper::Clock;
using rankrun::launcher::testing::node;
using rankrun::launcher::testing::rules;

namespace {
std::vector<std::string> instances(const RoundRecord& r) {
  std::vector<std::string> out;
  for (const auto& m : r.members) out.push_back(m.instance);
  return out;
}
}  // namespace

TEST_CASE("records: a round of thousands of nodes is a few pages, each under the record bound") {
  RoundRecord r{7, {}};
  for (int i = 0; i < 5000; ++i) {
    r.members.push_back(node("node" + std::to_string(i) + ".rack" + std::to_string(i / 40) + ".cluster.example.org",
                             {.node_rank = i, .nproc = 8, .instance = "instance-" + std::to_string(i)}));
    r.members.back().node_rank = i;
  }
  const auto pages = encode_pages(r);
  CHECK(pages.size() > 1);
  CHECK(pages.size() < 20);
  for (const auto& p : pages) CHECK(p.size() <= k_max_record / 2);
  const auto back = decode_pages(pages, 7, 5000);
  REQUIRE(back);
  CHECK(back->members[4321].host == r.members[4321].host);
  CHECK(back->members[4321].node_rank == 4321);
  auto swapped = pages;
  std::swap(swapped[0], swapped[1]);
  CHECK_FALSE(decode_pages(swapped, 7, 5000));  // pages out of order
}

TEST_CASE("the waiting line names the first hosts in natural order and counts the rest") {
  RoundKeeper k(rules(100, 100), Clock::now());
  for (int i = 40; i > 0; --i)
    k.join(node("node" + std::to_string(i), {.instance = "i" + std::to_string(i)}), Clock::now());
  const auto line = k.status(Clock::now());
  CHECK(line.find("(node1, node2, node3,") != std::string::npos);
  CHECK(line.find("node16 and 24 more)") != std::string::npos);
  CHECK(line.find("node17") == std::string::npos);
}

TEST_CASE("natural order: digit runs compare as numbers") {
  CHECK(natural_less("node2", "node10"));
  CHECK_FALSE(natural_less("node10", "node2"));
  CHECK(natural_less("10.0.0.2", "10.0.0.10"));
  CHECK(natural_less("a", "b"));
  CHECK(natural_less("node", "node1"));
  CHECK_FALSE(natural_less("node1", "node1"));
  CHECK(natural_less("node2", "node02"));  // equal numbers: fewer leading zeros first
  CHECK(natural_less("rack1-node9", "rack2-node1"));
}

TEST_CASE("ranks: kept from the round before when they fit, newcomers in natural host order") {
  auto ranked = assign_ranks(
      {node("node10", {.instance = "c"}), node("node2", {.instance = "b"}), node("node1", {.instance = "a"})});
  REQUIRE(ranked.size() == 3);
  CHECK(ranked[0].host == "node1");
  CHECK(ranked[1].host == "node2");
  CHECK(ranked[2].host == "node10");  // torch sorts these as text: node10 before node2

  // node9 had rank 1, node1 had rank 2 (too high for two nodes now): node9 keeps 1, node1 gets 0.
  ranked = assign_ranks(
      {node("node1", {.node_rank = 2, .instance = "a"}), node("node9", {.node_rank = 1, .instance = "b"})});
  CHECK(ranked[0].host == "node1");
  CHECK(ranked[1].host == "node9");
  // Two claims on one rank: the lower instance keeps it, deterministically.
  ranked = assign_ranks({node("h2", {.node_rank = 0, .instance = "y"}), node("h1", {.node_rank = 0, .instance = "x"})});
  CHECK(ranked[0].instance == "x");
  CHECK(ranked[1].instance == "y");
}

TEST_CASE("a round closes at MAX at once, or after the last call once MIN joined") {
  const auto t0 = Clock::now();
  RoundKeeper k(rules(2, 3), t0);
  CHECK(k.forming());
  CHECK_FALSE(k.join(node("h1", {.instance = "a"}), t0).closed);
  CHECK(k.status(t0).find("round 0: 1 of 2-3 nodes joined (h1); need 1 more; 600 s left") == 0);
  CHECK(k.next_deadline() == t0 + 600s);
  CHECK_FALSE(k.join(node("h2", {.instance = "b"}), t0 + 1s).closed);
  CHECK(k.next_deadline() == t0 + 31s);  // the last call runs from MIN
  CHECK(k.status(t0 + 11s).find("last call, 20 s left") != std::string::npos);
  CHECK_FALSE(k.tick(t0 + 30s).closed);
  const auto step = k.tick(t0 + 31s);
  REQUIRE(step.closed);
  CHECK(step.closed->round == 0);
  CHECK(instances(*step.closed) == std::vector<std::string>{"a", "b"});
  CHECK(k.running());
  CHECK(k.history() == std::vector<std::string>{"round 0: 2 nodes (world 4)"});

  RoundKeeper full(rules(2, 3), t0);
  full.join(node("h1", {.instance = "a"}), t0);
  full.join(node("h2", {.instance = "b"}), t0);
  const auto at_max = full.join(node("h3", {.instance = "c"}), t0);
  REQUIRE(at_max.closed);
  CHECK(at_max.closed->members.size() == 3);
}

TEST_CASE("a round that cannot reach MIN fails at join_timeout, naming who came; later nodes hear it") {
  const auto t0 = Clock::now();
  RoundKeeper k(rules(3, 3), t0);
  k.join(node("10.0.0.1", {.instance = "a"}), t0);
  CHECK_FALSE(k.tick(t0 + 599s).abort);
  const auto step = k.tick(t0 + 600s);
  REQUIRE(step.abort);
  CHECK(
      step.abort->find(
          "round 0 did not reach the minimum of 3 nodes within join_timeout (600 s): 1 node came (10.0.0.1); 2 missing") ==
      0);
  CHECK(step.told_closed == std::vector<std::string>{"a"});
  CHECK(k.closed());
  CHECK(k.join(node("10.0.0.2", {.instance = "b"}), t0 + 601s).told_closed == std::vector<std::string>{"b"});
}

TEST_CASE("a lost member: the running round restarts; the next closes as soon as the survivors are back") {
  const auto t0 = Clock::now();
  RoundKeeper k(rules(2, 3), t0);
  k.join(node("h1", {.instance = "a"}), t0);
  k.join(node("h2", {.instance = "b"}), t0);
  const auto first = k.join(node("h3", {.instance = "c"}), t0).closed;
  REQUIRE(first);
  CHECK(k.lost(7, t0 + 1s).restart == std::nullopt);  // not a member
  const auto step = k.lost(1, t0 + 5s);               // h2
  REQUIRE(step.restart);
  CHECK(*step.restart == "node h2 lost");
  CHECK(k.forming());
  CHECK(k.round() == 1);
  CHECK(k.expected_nodes() == 2);
  CHECK_FALSE(k.join(node("h3", {.node_rank = 2, .instance = "c"}), t0 + 6s).closed);
  const auto second =
      k.join(node("h1", {.node_rank = 0, .instance = "a"}), t0 + 6s);  // every survivor is back: no last call
  REQUIRE(second.closed);
  CHECK(second.closed->round == 1);
  REQUIRE(second.closed->members.size() == 2);
  CHECK(second.closed->members[0].instance == "a");  // kept rank 0
  CHECK(second.closed->members[1].instance == "c");  // rank 2 does not fit two nodes: 1
  CHECK(k.history().size() == 2);
}

TEST_CASE("a survivor that dies before it joins the next round is not waited for; one that joined is kept") {
  const auto t0 = Clock::now();
  RoundKeeper k(rules(1, 4), t0);
  k.join(node("h1", {.instance = "a"}), t0);
  k.join(node("h2", {.instance = "b"}), t0);
  k.join(node("h3", {.instance = "c"}), t0);
  REQUIRE(k.join(node("h4", {.instance = "d"}), t0).closed);
  REQUIRE(k.lost(3, t0 + 5s).restart);  // h4: round 1 waits for h1, h2 and h3
  CHECK(k.expected_nodes() == 3);
  CHECK_FALSE(
      k.join(node("h1", {.node_rank = 0, .instance = "a"}), t0 + 6s).closed);  // MIN is there: a 30 s last call runs
  // h1's old lease lapses after it joined (it refreshes it only until it joins): it stays.
  CHECK(k.rejoined(0));
  CHECK_FALSE(k.rejoined(1));
  CHECK_FALSE(k.lost(0, t0 + 6s).closed);
  CHECK(k.expected_nodes() == 3);
  CHECK_FALSE(k.join(node("h3", {.node_rank = 2, .instance = "c"}), t0 + 7s).closed);
  // h2, rank 1 of round 0, dies before it joins again: the round closes now with h1 and h3,
  // not at the end of the last call.
  const auto step = k.lost(1, t0 + 7s);
  CHECK_FALSE(step.restart);
  REQUIRE(step.closed);
  CHECK(instances(*step.closed) == std::vector<std::string>{"a", "c"});
  CHECK_FALSE(k.lost(7, t0 + 8s).closed);  // nobody's rank
}

TEST_CASE("a new node with room under MAX restarts the job with it; beyond MAX it is a spare until a node is lost") {
  const auto t0 = Clock::now();
  RoundKeeper k(rules(1, 2), t0);
  k.join(node("h1", {.instance = "a"}), t0);
  REQUIRE(k.tick(t0 + 30s).closed);
  auto step = k.join(node("h2", {.instance = "b"}), t0 + 40s);
  REQUIRE(step.restart);
  CHECK(*step.restart == "node h2 joined");
  CHECK(k.expected_nodes() == 2);
  CHECK(k.status(t0 + 40s).find("waiting for 1 node of the round before") != std::string::npos);
  step = k.join(node("h1", {.node_rank = 0, .instance = "a"}), t0 + 41s);
  REQUIRE(step.closed);
  CHECK(step.closed->members.size() == 2);
  CHECK(step.closed->members[1].instance == "b");

  step = k.join(node("h3", {.instance = "c"}), t0 + 50s);  // at MAX: a spare, told once
  CHECK_FALSE(step.restart);
  CHECK(step.new_spares == std::vector<std::string>{"c"});
  CHECK(k.join(node("h3", {.instance = "c"}), t0 + 51s).new_spares.empty());
  step = k.lost(0, t0 + 60s);
  REQUIRE(step.restart);
  CHECK(*step.restart == "node h1 lost");
  step = k.join(node("h2", {.node_rank = 1, .instance = "b"}), t0 + 61s);  // the survivor and the spare: round 2
  REQUIRE(step.closed);
  CHECK(instances(*step.closed) == std::vector<std::string>{"c", "b"});  // b keeps 1, c takes 0

  // The job ends: a waiting node and every later one are told.
  k.join(node("h4", {.instance = "d"}), t0 + 70s);
  CHECK(k.close_job().told_closed == std::vector<std::string>{"d"});
  CHECK(k.join(node("h5", {.instance = "e"}), t0 + 71s).told_closed == std::vector<std::string>{"e"});
}

TEST_CASE("survivors come first: a round never closes full of newcomers while a survivor is cleaning up") {
  const auto t0 = Clock::now();
  RoundKeeper k(rules(1, 2), t0);
  k.join(node("h1", {.instance = "a"}), t0);
  k.join(node("h2", {.instance = "b"}), t0);
  k.lost(1, t0 + 1s);
  k.join(node("h3", {.instance = "c"}), t0 + 2s);
  auto step = k.join(node("h4", {.instance = "d"}), t0 + 2s);
  CHECK_FALSE(step.closed);  // MAX joined, but not a's rejoin yet
  step = k.join(node("h1", {.node_rank = 0, .instance = "a"}), t0 + 3s);
  REQUIRE(step.closed);
  CHECK(instances(*step.closed) == std::vector<std::string>{"a", "c"});
  CHECK(step.new_spares == std::vector<std::string>{"d"});
}

TEST_CASE("a keeper that takes over (etcd) goes on with the running round: a lost member restarts it") {
  const auto t0 = Clock::now();
  RoundKeeper k(rules(2, 3), t0);
  auto a = node("h1", {.node_rank = 0, .instance = "a"});
  auto c = node("h3", {.node_rank = 2, .instance = "c"});
  auto b = node("h2", {.node_rank = 1, .instance = "b"});
  k.resume(4, {c, a, b}, t0);  // any order: by node rank
  CHECK(k.running());
  CHECK(k.round() == 4);
  REQUIRE(k.members().size() == 3);
  CHECK(k.members()[0].instance == "a");
  const auto step = k.lost(2, t0 + 1s);  // h3, the coordinator before
  REQUIRE(step.restart);
  CHECK(*step.restart == "node h3 lost");
  CHECK(k.round() == 5);
  CHECK(k.expected_nodes() == 2);
  // The wrong --rdzv-id is refused even as the first join this keeper sees: the job's run id
  // came with the members.
  auto other = node("h9", {.instance = "z"});
  other.run_id = "other";
  CHECK(k.join(other, t0 + 2s).refused.size() == 1);
  k.join(node("h1", {.node_rank = 0, .instance = "a"}), t0 + 2s);
  const auto next =
      k.join(node("h2", {.node_rank = 1, .instance = "b"}), t0 + 2s);  // both survivors back: closes at once
  REQUIRE(next.closed);
  CHECK(next.closed->round == 5);
  CHECK(instances(*next.closed) == std::vector<std::string>{"a", "b"});
}

TEST_CASE("a node with another --rdzv-id is refused, naming both") {
  const auto t0 = Clock::now();
  RoundKeeper k(rules(2, 2), t0);
  k.join(node("h1", {.instance = "a"}), t0);
  auto other = node("h2", {.instance = "b"});
  other.run_id = "other";
  const auto step = k.join(other, t0);
  REQUIRE(step.refused.size() == 1);
  CHECK(step.refused[0].second.find("h2 runs --rdzv-id=other but the job's nodes run --rdzv-id=job") == 0);
}

TEST_CASE("records: rounds and membership notices round-trip; attempt ids per round") {
  RoundRecord r{
      3, {node("h1", {.node_rank = 0, .instance = "a"}), node("h2", {.node_rank = 1, .nproc = 4, .instance = "b"})}};
  const auto pages = encode_pages(r);
  REQUIRE(pages.size() == 1);
  const auto back = decode_pages(pages, 3, 2);
  REQUIRE(back);
  CHECK(back->round == 3);
  REQUIRE(back->members.size() == 2);
  CHECK(back->members[1].host == "h2");
  CHECK(back->members[1].nproc == 4);
  CHECK(back->members[1].node_rank == 1);
  CHECK(back->members[1].run_id == "job");
  CHECK_FALSE(decode_pages(pages, 4, 2));  // another round's
  CHECK_FALSE(decode_pages(pages, 3, 3));  // a member missing
  CHECK_FALSE(decode_pages({}, 3, 0));
  CHECK_FALSE(
      decode_pages({R"({"record":"round","version":2,"round":3,"first":0,"run_id":"job","nodes":["x"]})"}, 3, 1));
  CHECK_FALSE(decode_pages({R"({"record":"round","version":2,"round":3,"first":0,"run_id":"job","nodes":[[0,"h1"]]})"},
                           3, 1));  // nproc 0
  CHECK_FALSE(decode_pages({R"({"record":"round","version":2,"round":3,"first":0,"run_id":"job","nodes":[[1,""]]})"}, 3,
                           1));  // no host

  const auto a = decode_assignment(encode(Assignment{3, 1, 2, 1}));
  REQUIRE(a);
  CHECK(a->round == 3);
  CHECK(a->node_rank == 1);
  CHECK(a->nodes == 2);
  CHECK(a->pages == 1);
  CHECK_FALSE(decode_assignment("3"));        // the answer of an older rankrun
  CHECK_FALSE(decode_assignment("3 2 2 1"));  // node rank beyond the round
  CHECK_FALSE(decode_assignment("3 0 2 0"));  // no page
  CHECK_FALSE(decode_assignment("3 0 2 1 junk"));
  CHECK_FALSE(decode_assignment("-3 0 2 1"));

  StopNotice n;
  n.kind = StopKind::Membership;
  n.node_rank = 0;
  n.host = "h1";
  n.why = "node h2 lost";
  n.next_round = 2;
  n.next_nodes = 1;
  const auto m = decode_notice(encode(n));
  REQUIRE(m);
  CHECK(m->kind == StopKind::Membership);
  CHECK(m->describe() == "node h2 lost; restarting with 1 node, round 2");

  CHECK(attempt_id(-1, 4) == 4);
  CHECK(attempt_id(0, 2) == 2);
  CHECK(attempt_id(3, 1) == 3001);
  CHECK(instance_in_join_key("join/abc") == std::optional<std::string>("abc"));
  CHECK_FALSE(instance_in_join_key("join/"));
  CHECK_FALSE(instance_in_join_key("lease/1"));
  CHECK(lease_prefix(-1) == "lease/");
  CHECK(lease_prefix(2) == "round/2/lease/");
}

TEST_CASE("a node that leaves before its round closes is not counted, and no round waits for it") {
  const auto t0 = Clock::now();
  RoundKeeper k(rules(2, 3), t0);
  k.join(node("h1", {.instance = "a"}), t0);
  k.join(node("h2", {.instance = "b"}), t0);
  CHECK(k.next_deadline() == t0 + 30s);
  CHECK_FALSE(k.leave("b", t0 + 1s).closed);
  CHECK(k.next_deadline() == t0 + 600s);  // below MIN again: no last call
  CHECK(k.leave("zzz", t0 + 1s).closed == std::nullopt);
  k.join(node("h3", {.instance = "c"}), t0 + 2s);
  const auto step = k.tick(t0 + 32s);
  REQUIRE(step.closed);
  CHECK(instances(*step.closed) == std::vector<std::string>{"a", "c"});

  // A survivor that never comes back: the round closes once the others are there.
  k.lost(0, t0 + 40s);
  CHECK_FALSE(k.join(node("h4", {.instance = "d"}), t0 + 41s).closed);
  const auto after = k.leave("c", t0 + 42s);  // c was expected; it left instead of rejoining
  CHECK(after.closed == std::nullopt);        // d alone is below MIN=2
}
