// cluster/attempt_steps: a running node's steps (lease, stop notice, restart barrier, final
// result), several nodes on one fake store.

#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "fake_link_store.hpp"
#include "launcher/cluster/attempt_steps.hpp"

using namespace rankrun::launcher;
using namespace rankrun::launcher::cluster;
using namespace std::chrono_literals;
using rankrun::launcher::testing::FakeStoreHost;
using Clock = std::chrono::steady_clock;

namespace {

StopNotice failure_on(int node_rank, int rank, int code) {
  StopNotice n;
  n.kind = StopKind::Failure;
  n.node_rank = node_rank;
  n.host = "10.0.0." + std::to_string(node_rank + 1);
  n.rank = rank;
  n.local_rank = 0;
  n.status = ExitStatus::exited(code);
  return n;
}

}  // namespace

TEST_CASE("attempt steps: a node's lease interval is a fifth of the node timeout, between 0.2 s and 3 s") {
  CHECK(lease_interval(15s) == 3s);
  CHECK(lease_interval(60s) == 3s);
  CHECK(lease_interval(5s) == 1s);
  CHECK(lease_interval(500ms) == 200ms);
}

TEST_CASE("attempt steps: a reply may take a third of the node timeout, and so may a try to connect again") {
  CHECK(reply_timeout(15s) == 5s);
  CHECK(reply_timeout(3s) == 1s);
  CHECK(reply_timeout(600ms) == 300ms);
  // A connection takes two round trips (TCP's handshake, then the store's): on a link with a
  // 300 ms round trip a try must last more than 0.6 s (it lasted 0.2 s, and never succeeded).
  CHECK(reconnect_try(3s, 3s) == 1s);
  CHECK(reconnect_try(10s, 10s) > 600ms);
  // Never past --node-timeout: what is left of it bounds the try, down to 0.2 s.
  CHECK(reconnect_try(10s, 1500ms) == 1500ms);
  CHECK(reconnect_try(10s, 50ms) == 200ms);
  CHECK(reconnect_try(10s, -1s) == 200ms);
}

TEST_CASE("attempt steps: the first stop notice wins; a second publisher and every watcher see the winner") {
  FakeStoreHost host;
  auto a = host.client("10.0.0.1");
  auto b = host.client("10.0.0.2");
  auto c = host.client("10.0.0.3");
  const auto first = publish_stop(*a, 4, failure_on(0, 1, 3));
  REQUIRE(first);
  CHECK(first->rank == 1);
  StopNotice signal;
  signal.kind = StopKind::Signal;
  signal.node_rank = 1;
  signal.signo = 15;
  const auto second = publish_stop(*b, 4, signal);
  REQUIRE(second);
  CHECK(second->kind == StopKind::Failure);
  CHECK(second->rank == 1);
  CHECK(second->exit_code() == 3);
  for (auto* client : {a.get(), b.get(), c.get()}) {
    const auto seen = await_notice(*client, 4, 1ms);
    CHECK(seen.published);
    REQUIRE(seen.notice);
    CHECK(seen.notice->kind == StopKind::Failure);
    CHECK(seen.notice->host == "10.0.0.1");
  }
  // Another attempt's notice is its own.
  CHECK_FALSE(await_notice(*c, 5, 1ms).published);
  CHECK(publish_stop(*b, 5, signal)->kind == StopKind::Signal);
}

TEST_CASE("attempt steps: a watching node refreshes its lease each interval and hears the notice when it comes") {
  FakeStoreHost host;
  auto a = host.client("10.0.0.1");
  auto b = host.client("10.0.0.2");
  NodeLease lease{lease_prefix(-1) + "1"};
  CHECK_FALSE(watch_interval(*b, lease, 0, 1ms).published);
  CHECK(host.value("lease/1") == "1");
  CHECK_FALSE(watch_interval(*b, lease, 0, 1ms).published);
  CHECK(host.value("lease/1") == "2");

  // The notice wakes a node in the middle of its interval.
  std::thread publisher([&] {
    while (host.pending_waits() == 0) std::this_thread::sleep_for(1ms);
    publish_stop(*a, 0, failure_on(0, 0, 1));
  });
  const auto started = Clock::now();
  const auto seen = watch_interval(*b, lease, 0, 60s);
  publisher.join();
  CHECK(Clock::now() - started < 30s);
  CHECK(seen.published);
  REQUIRE(seen.notice);
  CHECK(seen.notice->node_rank == 0);

  // A notice that does not decode is published but not readable.
  host.set(stop_key(1), "rankrun-stop/99\n");
  const auto garbled = watch_interval(*b, lease, 1, 1ms);
  CHECK(garbled.published);
  CHECK_FALSE(garbled.notice);
}

TEST_CASE("attempt steps: with etcd leases the lease key is put once with the node's lease, then kept alive") {
  FakeStoreHost host({.leases = true});
  auto client = host.client("10.0.0.1");
  const auto etcd_lease = client->grant(15s);
  NodeLease lease{lease_prefix(2) + "0", etcd_lease};
  client->calls.clear();
  watch_interval(*client, lease, attempt_id(2, 0), 1ms);
  watch_interval(*client, lease, attempt_id(2, 0), 1ms);
  CHECK(client->calls ==
        std::vector<std::string>{"set_leased round/2/lease/0", "wait stop/2000", "keep_alive", "wait stop/2000"});
  CHECK(host.value("round/2/lease/0") == "0");
  host.expire(etcd_lease);  // the node is lost: its lease key goes
  CHECK_FALSE(host.value("round/2/lease/0"));
  CHECK_THROWS_AS(watch_interval(*client, lease, attempt_id(2, 0), 1ms), rankrun::rendezvous::StoreError);
}

TEST_CASE("attempt steps: a node's attempt done and its final result reach the store host") {
  FakeStoreHost host;
  auto client = host.client("10.0.0.2");
  attempt_done(*client, 3, 1);
  CHECK(host.value(done_key(3, 1)) == "1");
  CHECK(done_in_key(done_key(3, 1)) == std::pair(3, 1));

  const NodeFinal mine{1, "10.0.0.2", 3, {"rank 2 (local 0, pid 41): exit 3", "rank 3 (local 1, pid 42): stopped"}};
  publish_final(*client, 1, mine);
  const auto stored = host.value(final_key(1));
  REQUIRE(stored);
  const auto back = decode_final(*stored);
  REQUIRE(back);
  CHECK(back->node_rank == 1);
  CHECK(back->host == "10.0.0.2");
  CHECK(back->exit_code == 3);
  CHECK(back->rows == mine.rows);
}

TEST_CASE("attempt steps: the restart barrier: the coordinator waits for every node, the others for its opening") {
  FakeStoreHost host;
  std::vector<StepResult<std::string>> results(3);
  std::vector<std::thread> nodes;
  for (int i = 0; i < 3; ++i) {
    nodes.emplace_back([&, i] {
      auto client = host.client("10.0.0." + std::to_string(i + 1));
      const bool coordinator = i == 0;
      auto& result = results[static_cast<std::size_t>(i)];
      result = ready_for(*client, 2, i, 3, coordinator, 30s);
      // The coordinator opens the attempt once every node is ready.
      if (coordinator && std::holds_alternative<std::string>(result)) open_attempt(*client, 2, "10.0.0.1:41234");
    });
  }
  for (auto& t : nodes) t.join();
  for (int i = 0; i < 3; ++i) {
    const auto& r = results[static_cast<std::size_t>(i)];
    REQUIRE(std::holds_alternative<std::string>(r));
    CHECK(std::get<std::string>(r) == (i == 0 ? "" : "10.0.0.1:41234"));
    CHECK(host.value(ready_key(2, i)) == "1");
  }
}

TEST_CASE("attempt steps: a restart barrier not passed within the timeout is a rendezvous failure naming the restart") {
  FakeStoreHost host;
  auto a = host.client("10.0.0.1");
  auto b = host.client("10.0.0.2");
  const auto coordinator = ready_for(*a, 1, 0, 2, true, 20ms);  // node 1 never comes
  REQUIRE(std::holds_alternative<RendezvousFailure>(coordinator));
  CHECK(std::get<RendezvousFailure>(coordinator).end == EarlyEnd::RendezvousFailed);
  CHECK(std::get<RendezvousFailure>(coordinator).message ==
        "restart 1: the nodes were not all ready within the rendezvous timeout");
  const auto other = ready_for(*b, 1, 1, 2, false, 20ms);  // and nobody opens it
  REQUIRE(std::holds_alternative<RendezvousFailure>(other));
  CHECK(std::get<RendezvousFailure>(other).message ==
        "restart 1: the nodes were not all ready within the rendezvous timeout");
}

TEST_CASE("attempt steps: the attempt's stop notice ends the barrier of every node waiting in it") {
  // A node dies at the barrier: the coordinator publishes its loss (here: another node's
  // signal) as the attempt's stop notice; no node may wait on for the rendezvous timeout.
  FakeStoreHost host;
  std::vector<StepResult<std::string>> results(2);
  std::vector<std::thread> nodes;
  for (int i = 0; i < 2; ++i) {
    nodes.emplace_back([&, i] {
      auto client = host.client("10.0.0." + std::to_string(i + 1));
      results[static_cast<std::size_t>(i)] = ready_for(*client, 3, i, 3, i == 0, 30s, nullptr, 10ms);  // node 2 is gone
    });
  }
  while (!host.value(ready_key(3, 0)) || !host.value(ready_key(3, 1))) std::this_thread::sleep_for(1ms);
  StopNotice n;
  n.kind = StopKind::NodeLost;
  n.node_rank = 2;
  auto publisher = host.client("10.0.0.9");
  publish_stop(*publisher, 3, n);
  for (auto& t : nodes) t.join();
  CHECK(std::holds_alternative<Stopped>(results[0]));
  CHECK(std::holds_alternative<Stopped>(results[1]));
}

TEST_CASE("attempt steps: between two slices of the barrier the node sends what it must, on the same connection") {
  // The coordinator's own notice of a node lost at the barrier is sent from within the wait
  // (its link has one connection for commands): the wait then ends.
  FakeStoreHost host;
  auto client = host.client("10.0.0.1");
  int calls = 0;
  const auto r = ready_for(
      *client, 1, 0, 2, true, 30s,
      [&](LinkStore& c) {
        if (++calls == 2) {
          StopNotice n;
          n.kind = StopKind::NodeLost;
          n.node_rank = 1;
          publish_stop(c, 1, n);
        }
        return true;
      },
      5ms);
  CHECK(std::holds_alternative<Stopped>(r));
  CHECK(calls == 2);
  // `between` returning false (the link stops) ends it too.
  const auto s = ready_for(
      *client, 2, 0, 2, true, 30s, [](LinkStore&) { return false; }, 5ms);
  CHECK(std::holds_alternative<Stopped>(s));
}

TEST_CASE("attempt steps: a store host lost mid-step throws StoreError; an interrupt ends a blocked watch") {
  FakeStoreHost host;
  auto client = host.client("10.0.0.1");
  host.lose_after(1);  // the ready key goes through, the wait does not
  CHECK_THROWS_AS(ready_for(*client, 0, 0, 2, true, 30s), rankrun::rendezvous::StoreError);
  CHECK(host.value(ready_key(0, 0)) == "1");

  FakeStoreHost other;
  auto watcher = other.client("10.0.0.2");
  NodeLease lease{"lease/1"};
  std::thread stopper([&] {
    while (other.pending_waits() == 0) std::this_thread::sleep_for(1ms);
    watcher->interrupt();  // what NodeLink::stop() does from another thread
  });
  CHECK_THROWS_AS(watch_interval(*watcher, lease, 0, 60s), rankrun::rendezvous::StoreError);
  stopper.join();
}
