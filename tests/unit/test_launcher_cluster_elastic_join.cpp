// cluster/elastic_join: an elastic node's join, its waiting traffic and what the answer means,
// with the store host's answers written into a fake store.

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <variant>
#include <vector>

#include "cluster_fixtures.hpp"
#include "fake_link_store.hpp"
#include "launcher/cluster/elastic_join.hpp"

using namespace rankrun::launcher;
using namespace rankrun::launcher::cluster;
using namespace std::chrono_literals;
using rankrun::launcher::testing::FakeStoreHost;
using rankrun::launcher::testing::node;

namespace {

// What the store host writes when round `round` closes with `members` (in node rank order):
// the map's pages and each member's assignment.
void close_round(FakeStoreHost& host, int round, std::vector<NodeRecord> members) {
  RoundRecord r{round, std::move(members)};
  for (std::size_t i = 0; i < r.members.size(); ++i) r.members[i].node_rank = static_cast<int>(i);
  const auto pages = encode_pages(r);
  for (std::size_t p = 0; p < pages.size(); ++p) host.set(round_map_key(round, static_cast<int>(p)), pages[p]);
  for (std::size_t i = 0; i < r.members.size(); ++i) {
    const Assignment a{round, static_cast<int>(i), static_cast<int>(r.members.size()), static_cast<int>(pages.size())};
    host.set(assign_key(r.members[i].instance), encode(a));
  }
}

// A join whose answer the store host writes at the node's first poll.
JoinAnswer join_answered(LinkStore& client, const NodeRecord& me, const std::function<void()>& answer) {
  int polls = 0;
  auto out = join_round(
      client, me,
      [&](LinkStore&) {
        if (polls++ == 0) answer();
        return true;
      },
      1ms);
  CHECK(polls == 1);
  return out;
}

}  // namespace

TEST_CASE("elastic join: the node announces itself, and its round is the one the store host answered") {
  FakeStoreHost host;
  const auto a = node("10.0.0.1", {.node_rank = 1});
  const auto b = node("10.0.0.2", {.nproc = 4});
  const auto c = node("10.0.0.3", {.node_rank = 0, .nproc = 1});
  auto client = host.client("10.0.0.2");
  const auto answer = join_answered(*client, b, [&] {
    // The join is there for the store host to read.
    const auto stored = host.value(join_key(b.instance));
    REQUIRE(stored);
    const auto joined = decode_node(*stored);
    REQUIRE(joined);
    CHECK(joined->host == "10.0.0.2");
    CHECK(joined->nproc == 4);
    close_round(host, 3, {c, a, b});
  });
  REQUIRE(answer.kind == JoinAnswer::Kind::Round);
  CHECK(answer.node_rank == 2);
  CHECK(answer.round.round == 3);
  REQUIRE(answer.round.members.size() == 3);
  CHECK(answer.round.members[0].host == "10.0.0.3");

  const auto joined = joined_round(answer);
  REQUIRE(std::holds_alternative<JoinedRound>(joined));
  const auto& r = std::get<JoinedRound>(joined);
  CHECK(r.round == 3);
  CHECK(r.node_rank == 2);
  CHECK(r.map.world_size == 7);
  CHECK(r.map.nodes[2].first_rank == 3);
  CHECK(r.map.nodes[2].host == "10.0.0.2");
}

TEST_CASE("elastic join: an answer left from the round before is not taken for this join's") {
  FakeStoreHost host;
  const auto a = node("10.0.0.1");
  host.set(assign_key(a.instance), "closed\nan old answer");
  auto client = host.client("10.0.0.1");
  const auto answer = join_answered(*client, a, [&] { close_round(host, 1, {a}); });
  CHECK(answer.kind == JoinAnswer::Kind::Round);
  CHECK(answer.round.round == 1);
}

TEST_CASE("elastic join: a round that cannot form, a closed job, an unreadable answer") {
  FakeStoreHost host;
  const auto a = node("10.0.0.1");
  auto client = host.client("10.0.0.1");

  SUBCASE("abort") {
    const auto answer = join_answered(*client, a, [&] {
      host.set(assign_key(a.instance), "abort\nround 0 did not reach 2 nodes within join_timeout (600 s)");
    });
    CHECK(answer.kind == JoinAnswer::Kind::Abort);
    CHECK(answer.message == "round 0 did not reach 2 nodes within join_timeout (600 s)");
    const auto joined = joined_round(answer);
    REQUIRE(std::holds_alternative<RendezvousFailure>(joined));
    CHECK(std::get<RendezvousFailure>(joined).end == EarlyEnd::RendezvousFailed);
    CHECK(std::get<RendezvousFailure>(joined).message == "round 0 did not reach 2 nodes within join_timeout (600 s)");
  }
  SUBCASE("closed") {
    const auto answer = join_answered(*client, a, [&] { host.set(assign_key(a.instance), "closed\nthe job is over"); });
    CHECK(answer.kind == JoinAnswer::Kind::Closed);
    CHECK(answer.message == "the job is over");
    const auto joined = joined_round(answer);
    REQUIRE(std::holds_alternative<RendezvousFailure>(joined));
    CHECK(std::get<RendezvousFailure>(joined).end == EarlyEnd::RendezvousClosed);
    CHECK(std::get<RendezvousFailure>(joined).message == "the rendezvous is closed: the job is over");
  }
  SUBCASE("unreadable") {
    const auto answer = join_answered(*client, a, [&] { host.set(assign_key(a.instance), "round=x"); });
    CHECK(answer.kind == JoinAnswer::Kind::Unreadable);
    CHECK(answer.message == "the answer to this node's join is not readable: round=x");
    const auto joined = joined_round(answer);
    REQUIRE(std::holds_alternative<RendezvousFailure>(joined));
    CHECK(std::get<RendezvousFailure>(joined).end == EarlyEnd::RendezvousFailed);
  }
  SUBCASE("a map that names another host in this node's place") {
    const auto answer = join_answered(*client, a, [&] {
      close_round(host, 2, {node("10.0.0.7")});
      host.set(assign_key(a.instance), encode(Assignment{2, 0, 1, 1}));
    });
    CHECK(answer.kind == JoinAnswer::Kind::Unreadable);
    CHECK(answer.message.rfind("the answer to this node's join is not readable: ", 0) == 0);
  }
  SUBCASE("the node gives up (it is stopping)") {
    const auto answer = join_round(
        *client, a, [](LinkStore&) { return false; }, 1ms);
    CHECK(answer.kind == JoinAnswer::Kind::Unreadable);
    CHECK(answer.message == "stopped");
  }
}

TEST_CASE(
    "elastic join: the waiting node reads the waiting line and its spare notice, and prints them when they change") {
  FakeStoreHost host;
  auto client = host.client("10.0.0.1");
  JoinProgress progress("me", 0, 3s);
  CHECK(progress.poll() == 1s);  // no lease: every second
  std::vector<std::string> said;
  const Say say = [&](const std::string& line) { said.push_back(line); };

  progress.step(*client, say);  // nothing to read yet
  CHECK(client->calls == std::vector<std::string>{"check " + spare_key("me"), "check rdzv/status"});
  CHECK(said.empty());

  host.set(k_status_key, "round 0: 1 of 2-4 joined (10.0.0.1); 600 s left");
  progress.step(*client, say);
  host.set(k_status_key, "round 0: 1 of 2-4 joined (10.0.0.1); 599 s left");  // only the time changed
  progress.step(*client, say);
  host.set(k_status_key, "round 0: 2 of 2-4 joined (10.0.0.1, 10.0.0.2); last call, 30 s left");
  progress.step(*client, say);
  CHECK(said == std::vector<std::string>{
                    "waiting for nodes: round 0: 1 of 2-4 joined (10.0.0.1); 600 s left",
                    "waiting for nodes: round 0: 2 of 2-4 joined (10.0.0.1, 10.0.0.2); last call, 30 s left"});

  // A spare is told once, and the waiting line is no longer printed.
  said.clear();
  host.set(spare_key("me"), "the job has its 4 nodes: this node waits as a spare");
  host.set(k_status_key, "round 1: 3 of 2-4 joined; 10 s left");
  progress.step(*client, say);
  progress.step(*client, say);
  CHECK(said == std::vector<std::string>{"the job has its 4 nodes: this node waits as a spare"});
}

TEST_CASE("elastic join: with etcd leases the waiting node keeps its lease alive, and a lapsed lease is replaced") {
  FakeStoreHost host({.leases = true});
  auto client = host.client("10.0.0.1");
  const auto lease = renew_or_grant(*client, 0, 15s);
  CHECK(lease != 0);
  CHECK(renew_or_grant(*client, lease, 15s) == lease);
  host.expire(lease);
  const auto next = renew_or_grant(*client, lease, 15s);
  CHECK(next != 0);
  CHECK(next != lease);

  JoinProgress progress("me", next, 0ms);
  CHECK(progress.poll() == 0ms);  // with a lease: once a lease interval
  client->calls.clear();
  progress.step(*client, [](const std::string&) {});
  CHECK(client->calls.front() == "keep_alive");

  // The join goes with the lease.
  const auto me = node("10.0.0.1");
  int polls = 0;
  join_round(
      *client, me, [&](LinkStore&) { return polls++ == 0; }, 1ms, next);
  CHECK(host.value(join_key(me.instance)));
  host.expire(next);
  CHECK_FALSE(host.value(join_key(me.instance)));

  // The TCP store has none.
  FakeStoreHost tcp;
  auto plain = tcp.client("10.0.0.1");
  CHECK(renew_or_grant(*plain, 0, 15s) == 0);
}

TEST_CASE("elastic join: a store host lost while the node waits throws StoreError") {
  FakeStoreHost host;
  auto client = host.client("10.0.0.1");
  const auto me = node("10.0.0.1");
  host.lose_after(4);  // the delete, the join, one wait and the waiting line's check go through
  int polls = 0;
  CHECK_THROWS_AS(join_round(
                      *client, me,
                      [&](LinkStore& c) {
                        ++polls;
                        c.check({k_status_key});
                        return true;
                      },
                      1ms),
                  rankrun::rendezvous::StoreError);
  CHECK(polls == 1);
  CHECK(host.value(join_key(me.instance)));
}

TEST_CASE("elastic join: tried again after a lost connection, the join keeps the answer given meanwhile") {
  FakeStoreHost host;
  const auto me = node("10.0.0.1");
  host.set(assign_key(me.instance), "closed\nan answer left from the round before");
  JoinState state;
  auto first = host.client("10.0.0.1");
  host.lose_after(3);  // the delete, the join, one wait; then the connection is gone
  CHECK_THROWS_AS(join_round(
                      *first, me, [](LinkStore&) { return true; }, 1ms, 0, state),
                  rankrun::rendezvous::StoreError);
  CHECK(state.cleared);
  // The store host answered while the node had no connection.
  host.lose_after(-1);
  close_round(host, 2, {node("10.0.0.2"), me});
  auto second = host.client("10.0.0.1");
  int polls = 0;
  const auto answer = join_round(
      *second, me, [&](LinkStore&) { return ++polls < 5; }, 1ms, 0, state);
  REQUIRE(answer.kind == JoinAnswer::Kind::Round);
  CHECK(answer.round.round == 2);
  CHECK(answer.node_rank == 1);
  CHECK(polls == 0);
  CHECK_FALSE(std::count(second->calls.begin(), second->calls.end(), "delete_key " + assign_key(me.instance)));
}
