// cluster/etcd_coordinator: the election of the rankrun that keeps an etcd job's rounds, its
// view of the job's keys and its answers, on a fake etcd (its EtcdSession seam over the fake
// store, with leases): one of several is elected, it sees what etcd held and every change, its
// writes land in order, another takes over when it stops, and it says when it can coordinate no
// more.

#include <doctest/doctest.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cluster_fixtures.hpp"
#include "fake_channels.hpp"
#include "fake_link_store.hpp"
#include "launcher/cluster/etcd_coordinator.hpp"

using namespace rankrun::launcher;
using namespace rankrun::launcher::cluster;
using namespace std::chrono_literals;
using rankrun::launcher::testing::FakeEtcdSession;
using rankrun::launcher::testing::FakeStoreHost;
using rankrun::launcher::testing::FakeStoreOptions;
using rankrun::launcher::testing::run_until;
namespace rz = rankrun::rendezvous;

namespace {

FakeStoreOptions etcd_like() {
  FakeStoreOptions o;
  o.leases = true;
  return o;
}

// One campaigning rankrun, and what it heard.
struct Campaigner {
  Campaigner(boost::asio::io_context& io, FakeStoreHost& etcd, const std::string& name,
             std::chrono::milliseconds node_timeout = 1s) {
    EtcdCoordinator::Settings s;
    s.prefix = "/rankrun/job/";
    s.node_timeout = node_timeout;
    s.name = name;
    s.connect = [&etcd]() -> std::unique_ptr<EtcdSession> { return std::make_unique<FakeEtcdSession>(etcd); };
    coordinator = std::make_unique<EtcdCoordinator>(
        io, s,
        EtcdCoordinator::Hooks{[this] {
                                 ++elections;
                                 at_election = coordinator->keys("");
                               },
                               [this](const rz::EtcdEvent& e) { events.push_back(e); },
                               [this](std::string why) { failed = std::move(why); }});
  }
  bool elected() const { return coordinator->elected(); }
  bool saw(const std::string& key, bool deleted = false) const {
    for (const auto& e : events) {
      if (e.key == key && e.deleted == deleted) return true;
    }
    return false;
  }

  std::unique_ptr<EtcdCoordinator> coordinator;
  int elections = 0;
  std::vector<std::pair<std::string, std::string>> at_election;
  std::vector<rz::EtcdEvent> events;
  std::optional<std::string> failed;
};

}  // namespace

TEST_CASE(
    "etcd coordinator: of two campaigners one is elected; it sees the job's keys as they were, then each change") {
  boost::asio::io_context io;
  FakeStoreHost etcd(etcd_like());
  etcd.set("join/early", "a node that asked before the election");
  Campaigner a(io, etcd, "node-a pid 1"), b(io, etcd, "node-b pid 2");
  a.coordinator->start();
  b.coordinator->start();
  REQUIRE(run_until(io, [&] { return a.elected() || b.elected(); }));
  run_until(
      io, [] { return false; }, 300ms);  // the loser stays a campaigner
  CHECK(a.elected() != b.elected());
  auto& winner = a.elected() ? a : b;
  auto& loser = a.elected() ? b : a;
  CHECK(winner.elections == 1);
  CHECK(loser.elections == 0);
  CHECK(etcd.value(k_coordinator_key) == (a.elected() ? "node-a pid 1" : "node-b pid 2"));
  // What etcd held at the election.
  CHECK(winner.coordinator->value("join/early") == "a node that asked before the election");
  bool listed = false;
  for (const auto& [key, value] : winner.at_election) listed |= key == "join/early";
  CHECK(listed);
  // Each change after it, in etcd's order; value() already shows it when the hook runs.
  auto client = etcd.client();
  client->set("join/late", "a node that asked after");
  client->set("round/0/lease/1", "0");
  client->delete_key("join/early");
  REQUIRE(run_until(io, [&] { return winner.saw("join/early", true); }));
  CHECK(winner.saw("join/late"));
  CHECK(winner.coordinator->value("join/late") == "a node that asked after");
  CHECK_FALSE(winner.coordinator->value("join/early"));
  const auto join_keys = winner.coordinator->keys("join/");
  REQUIRE(join_keys.size() == 1);
  CHECK(join_keys[0].first == "join/late");
  std::vector<std::string> order;
  for (const auto& e : winner.events) {
    if (e.key != k_coordinator_key) order.push_back(e.key);
  }
  CHECK(order == std::vector<std::string>{"join/late", "round/0/lease/1", "join/early"});
  CHECK(loser.events.empty());
  a.coordinator->stop(0ms);
  b.coordinator->stop(0ms);
}

TEST_CASE("etcd coordinator: its answers are written in the order of the calls; value() shows them at once") {
  boost::asio::io_context io;
  FakeStoreHost etcd(etcd_like());
  Campaigner a(io, etcd, "node-a pid 1");
  a.coordinator->start();
  REQUIRE(run_until(io, [&] { return a.elected(); }));
  a.coordinator->set("round/0/map/0", "the map");
  a.coordinator->set("assign/x", "round 0, rank 0");
  a.coordinator->set("rdzv/status", "first");
  a.coordinator->set("rdzv/status", "second");
  CHECK(a.coordinator->value("assign/x") == "round 0, rank 0");  // before etcd has it
  REQUIRE(run_until(io, [&] { return etcd.value("rdzv/status") == "second"; }));
  CHECK(etcd.value("round/0/map/0") == "the map");
  CHECK(etcd.value("assign/x") == "round 0, rank 0");
  // The map before the answer that points at it: the coordinator's watch shows etcd's order.
  REQUIRE(run_until(io, [&] { return a.saw("assign/x"); }));
  std::vector<std::string> order;
  for (const auto& e : a.events) {
    if (e.key != k_coordinator_key) order.push_back(e.key);
  }
  REQUIRE(order.size() >= 2);
  CHECK(order[0] == "round/0/map/0");
  CHECK(order[1] == "assign/x");
  a.coordinator->stop();
}

TEST_CASE("etcd coordinator: when the coordinator stops, its key goes with its lease and another takes over") {
  boost::asio::io_context io;
  FakeStoreHost etcd(etcd_like());
  Campaigner a(io, etcd, "node-a pid 1");
  a.coordinator->start();
  REQUIRE(run_until(io, [&] { return a.elected(); }));
  Campaigner b(io, etcd, "node-b pid 2");
  b.coordinator->start();
  run_until(
      io, [] { return false; }, 200ms);
  CHECK_FALSE(b.elected());
  a.coordinator->stop();
  REQUIRE(run_until(
      io, [&] { return b.elected(); }, 3s));
  CHECK(etcd.value(k_coordinator_key) == "node-b pid 2");
  CHECK_FALSE(a.failed);
  b.coordinator->stop();
}

TEST_CASE("etcd coordinator: it stops coordinating when its key goes, or etcd is gone for --node-timeout") {
  boost::asio::io_context io;
  FakeStoreHost etcd(etcd_like());
  Campaigner a(io, etcd, "node-a pid 1", 1s);
  a.coordinator->start();
  REQUIRE(run_until(io, [&] { return a.elected(); }));
  SUBCASE("its key deleted (its lease lapsed)") {
    etcd.client()->delete_key(k_coordinator_key);
    REQUIRE(run_until(io, [&] { return a.failed.has_value(); }));
    CHECK(*a.failed == "this node's coordinator key in etcd went away (its lease lapsed)");
  }
  SUBCASE("etcd gone: after --node-timeout, not before") {
    const auto gone = std::chrono::steady_clock::now();
    etcd.lose_after(0);
    run_until(
        io, [&] { return a.failed.has_value(); }, 700ms);
    CHECK_FALSE(a.failed);  // a short fault is outlived
    REQUIRE(run_until(
        io, [&] { return a.failed.has_value(); }, 5s));
    CHECK(std::chrono::steady_clock::now() - gone >= 900ms);
    CHECK(a.failed->find("lost by the test") != std::string::npos);
  }
  a.coordinator->stop(0ms);
}
