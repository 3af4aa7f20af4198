// rdzv/: the backends as the Job gets them (make_backend), several nodes in one process, their
// channels replaced by fakes on one in-memory store (rdzv::Channels): each kind forms its round
// and the Job hears `formed`, and fails as it must, with the words the user sees.

#include <doctest/doctest.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cluster_fixtures.hpp"
#include "fake_channels.hpp"
#include "fake_link_store.hpp"
#include "launcher/types/exit_status.hpp"
#include "launcher/rdzv/backend.hpp"
#include "rendezvous/etcd_client.hpp"
#include "rendezvous/store_server.hpp"

using namespace rankrun::launcher;
using namespace std::chrono_literals;
using rankrun::launcher::testing::FakeAgentsStore;
using rankrun::launcher::testing::FakeEtcdSession;
using rankrun::launcher::testing::FakeStoreHost;
using rankrun::launcher::testing::FakeStoreOptions;
using rankrun::launcher::testing::run_until;
namespace rz = rankrun::rendezvous;

namespace {

// One node's Job, as its backend sees it: what it hosts, and what it heard.
struct FakeJob {
  rz::StoreServer* store = nullptr;  // the store this node hosts (the store host; etcd: every node may)
  std::optional<rdzv::Round> formed;
  std::optional<std::pair<EarlyEnd, std::string>> failed;
  std::vector<std::pair<int, cluster::StopNotice>> notices;
  std::optional<std::string> lost;
  std::optional<std::string> hosted_on;  // etcd: where it was asked to host the workers' store

  rdzv::JobSide side() {
    return rdzv::JobSide{[this] { return store; },
                         [this](const std::string& host) {
                           hosted_on = host;
                           return true;
                         },
                         [] { return 0; }, [] { return false; }};
  }
  rdzv::Hooks hooks() {
    rdzv::Hooks h;
    h.formed = [this](rdzv::Round r) { formed = std::move(r); };
    h.failed = [this](EarlyEnd end, std::string message) { failed.emplace(end, std::move(message)); };
    h.notice = [this](int attempt, cluster::StopNotice n) { notices.emplace_back(attempt, std::move(n)); };
    h.lost = [this](std::string why) { lost = std::move(why); };
    h.leave = [](EarlyEnd) {};
    return h;
  }
};

// The store a node's Job hosts (its port is what the backend names; its traffic is the fake's).
rz::ServerOptions loopback() {
  rz::ServerOptions o;
  o.bind_address = "127.0.0.1";
  o.port = 0;
  return o;
}

// A node at `address` on `store`: its links' connections, the coordinator's parts.
rdzv::Channels fakes(boost::asio::io_context& io, FakeStoreHost& store, std::string address) {
  rdzv::Channels c;
  c.link = [&store, address](const cluster::LinkConnect&) -> std::unique_ptr<cluster::LinkStore> {
    return store.client(address);
  };
  c.hosted = [&io, &store](rz::StoreServer&) -> std::unique_ptr<cluster::AgentsStore> {
    return std::make_unique<FakeAgentsStore>(io, store);
  };
  c.etcd = [&store]() -> std::unique_ptr<cluster::EtcdSession> { return std::make_unique<FakeEtcdSession>(store); };
  return c;
}

// A connect that fails as a real one does, a moment after it began.
rdzv::Channels failing(std::function<void()> fail) {
  rdzv::Channels c;
  c.link = [fail = std::move(fail)](const cluster::LinkConnect& how) -> std::unique_ptr<cluster::LinkStore> {
    std::this_thread::sleep_for(std::min<std::chrono::milliseconds>(how.connect_timeout, 50ms));
    fail();
    return nullptr;
  };
  return c;
}

LaunchConfig multi_node(RdzvKind kind, int node_rank = 0) {
  LaunchConfig c;
  c.rdzv = kind;
  c.nnodes = 2;
  c.min_nodes = 2;
  c.node_rank = node_rank;
  c.nproc = 2;
  c.run_id = "job";
  c.master_addr = "127.0.0.1";
  c.master_port = kind == RdzvKind::C10d ? 29400 : 29500;
  c.node_timeout = 1.0;
  c.rdzv_timeout = 10.0;
  c.join_timeout = 10.0;
  c.last_call_timeout = 0.2;
  if (kind == RdzvKind::Etcd) {
    c.master_addr = {};
    c.master_port.reset();
    c.etcd_settings.host = "127.0.0.1";
    c.etcd_settings.port = 2379;
    c.etcd_settings.prefix = "/rankrun/job/";
  }
  return c;
}

// The node ranks of the rounds `jobs` heard, and their map's size.
std::multiset<int> ranks(const std::vector<FakeJob*>& jobs) {
  std::multiset<int> out;
  for (const auto* j : jobs) out.insert(j->formed->node_rank);
  return out;
}

}  // namespace

TEST_CASE("rdzv static: node 0 hosts, two nodes claim their ranks and are formed; a node gone is published lost") {
  boost::asio::io_context io;
  FakeStoreHost store;
  rz::StoreServer server(io, loopback());
  const auto config0 = multi_node(RdzvKind::Static, 0);
  const auto config1 = multi_node(RdzvKind::Static, 1);
  FakeJob zero, one;
  zero.store = &server;
  auto a = rdzv::make_backend(io, config0, zero.side(), fakes(io, store, "10.0.0.1"));
  auto b = rdzv::make_backend(io, config1, one.side(), fakes(io, store, "10.0.0.2"));
  a->start(zero.hooks());
  b->start(one.hooks());
  REQUIRE(run_until(
      io, [&] { return zero.formed && one.formed; }, 10s));
  CHECK_FALSE(zero.failed);
  CHECK_FALSE(one.failed);
  CHECK(zero.formed->round == -1);
  CHECK(zero.formed->node_rank == 0);
  CHECK(one.formed->node_rank == 1);
  REQUIRE(one.formed->map);
  REQUIRE(one.formed->map->nodes.size() == 2);
  CHECK(one.formed->map->nodes[0].host == "10.0.0.1");
  CHECK(one.formed->host == "10.0.0.2");
  CHECK(a->role(0) == " (this node hosts the store)");
  CHECK(b->role(1).empty());
  CHECK(a->workers_port() == server.port());
  CHECK(b->where() == "the store host 127.0.0.1:29500");

  // Node 1 goes without a word: node 0 times its lease on the store's traffic, and publishes it
  // lost to every node (itself included) a --node-timeout later.
  b.reset();
  REQUIRE(run_until(
      io, [&] { return !zero.notices.empty(); }, 5s));
  CHECK(zero.notices.front().first == 0);
  CHECK(zero.notices.front().second.kind == cluster::StopKind::NodeLost);
  CHECK(zero.notices.front().second.node_rank == 1);
  CHECK(zero.notices.front().second.host == "10.0.0.2");
  a.reset();
  server.stop();
}

TEST_CASE("rdzv static: a store host that never answers fails the rendezvous at its timeout, saying what to check") {
  boost::asio::io_context io;
  auto config = multi_node(RdzvKind::Static, 1);
  config.rdzv_timeout = 1.0;
  FakeJob one;
  auto b = rdzv::make_backend(io, config, one.side(), failing([] {
                                throw rz::StoreError(
                                    rz::StoreFailure::Unreachable,
                                    "cannot connect to the store at 127.0.0.1:29500 within 500 ms: Connection refused",
                                    "Connection refused", rz::StoreStage::Connect);
                              }));
  b->start(one.hooks());
  REQUIRE(run_until(
      io, [&] { return one.failed.has_value(); }, 5s));
  CHECK(one.failed->first == EarlyEnd::RendezvousFailed);
  CHECK(one.failed->second ==
        "could not reach the store host 127.0.0.1:29500 within the rendezvous timeout (1 s): Connection refused; check "
        "--master-addr/--master-port and that node 0 runs");
  CHECK_FALSE(one.formed);
}

TEST_CASE("rdzv c10d: the endpoint's host keeps the rounds; two nodes join round 0 and are formed") {
  boost::asio::io_context io;
  FakeStoreHost store;
  rz::StoreServer server(io, loopback());
  const auto config = multi_node(RdzvKind::C10d);
  FakeJob host, other;
  host.store = &server;
  auto a = rdzv::make_backend(io, config, host.side(), fakes(io, store, "10.0.0.1"));
  auto b = rdzv::make_backend(io, config, other.side(), fakes(io, store, "10.0.0.2"));
  a->start(host.hooks());
  b->start(other.hooks());
  REQUIRE(run_until(
      io, [&] { return host.formed && other.formed; }, 10s));
  CHECK_FALSE(host.failed);
  CHECK_FALSE(other.failed);
  CHECK(host.formed->round == 0);
  CHECK(other.formed->round == 0);
  CHECK(ranks({&host, &other}) == std::multiset<int>{0, 1});
  REQUIRE(other.formed->map);
  CHECK(other.formed->map->nodes.size() == 2);
  CHECK(store.value(cluster::round_map_key(0, 0)).has_value());  // the store host's answers, in the agents' keys
  a.reset();
  b.reset();
  server.stop();
}

TEST_CASE("rdzv c10d: failures: a store host that refuses this node's secret, a host that closes the rendezvous") {
  boost::asio::io_context io;
  SUBCASE("the job secrets differ: at once, naming the store host and what to do") {
    const auto config = multi_node(RdzvKind::C10d);
    FakeJob other;
    auto b = rdzv::make_backend(io, config, other.side(), failing([] {
                                  throw rz::StoreRefused(
                                      "store 127.0.0.1:29400: refused this connection: wrong job secret",
                                      "refused this connection: wrong job secret", true, "wrong job secret");
                                }));
    b->start(other.hooks());
    REQUIRE(run_until(
        io, [&] { return other.failed.has_value(); }, 5s));
    CHECK(other.failed->first == EarlyEnd::RendezvousFailed);
    CHECK(
        other.failed->second ==
        "the job secrets differ: the store host 127.0.0.1:29400 refused this connection: wrong job secret; give every "
        "node the same secret (this node has none: set --rdzv-conf secret_file=PATH or RANKRUN_JOB_SECRET_FILE=PATH)");
  }
  SUBCASE("the store host stops while a node waits for the round: the waiting node hears why") {
    FakeStoreHost store;
    rz::StoreServer server(io, loopback());
    auto config = multi_node(RdzvKind::C10d);
    config.nnodes = 3;
    config.min_nodes = 3;  // two nodes never make a round
    FakeJob host, other;
    host.store = &server;
    auto a = rdzv::make_backend(io, config, host.side(), fakes(io, store, "10.0.0.1"));
    auto b = rdzv::make_backend(io, config, other.side(), fakes(io, store, "10.0.0.2"));
    a->start(host.hooks());
    b->start(other.hooks());
    run_until(
        io, [] { return false; }, 500ms);  // both have asked for a round, which waits for a third
    CHECK_FALSE(other.failed);
    bool done = false;
    a->abort_waiting(2, [&] { done = true; });
    CHECK(done);
    REQUIRE(run_until(
        io, [&] { return other.failed.has_value(); }, 5s));
    CHECK(other.failed->first == EarlyEnd::RendezvousFailed);
    CHECK(other.failed->second.find("rankrun on the store host received SIGINT") != std::string::npos);
    CHECK_FALSE(other.formed);
    a.reset();
    b.reset();
    server.stop();
  }
}

TEST_CASE("rdzv etcd: one rankrun is elected, keeps the round, both nodes are formed; node rank 0 opens the attempt") {
  boost::asio::io_context io;
  FakeStoreOptions etcd_like;
  etcd_like.leases = true;
  FakeStoreHost store(etcd_like);
  rz::StoreServer server0(io, loopback()), server1(io, loopback());
  const auto config = multi_node(RdzvKind::Etcd);
  FakeJob one, two;
  one.store = &server0;
  two.store = &server1;
  auto a = rdzv::make_backend(io, config, one.side(), fakes(io, store, "10.0.0.1"));
  auto b = rdzv::make_backend(io, config, two.side(), fakes(io, store, "10.0.0.2"));
  a->start(one.hooks());
  b->start(two.hooks());
  REQUIRE(run_until(
      io, [&] { return one.formed && two.formed; }, 10s));
  CHECK_FALSE(one.failed);
  CHECK_FALSE(two.failed);
  CHECK(one.formed->round == 0);
  CHECK(ranks({&one, &two}) == std::multiset<int>{0, 1});
  REQUIRE(one.formed->map);
  CHECK(one.formed->map->nodes.size() == 2);
  CHECK(store.value(cluster::k_coordinator_key).has_value());  // the election's key
  CHECK(a->where() == "etcd at 127.0.0.1:2379");
  // The nodes' liveness is the store's lease, kept alive.
  CHECK(run_until(
      io, [&] { return store.calls_of("keep_alive") > 0; }, 3s));

  // Before the first attempt, node rank 0 hosts the workers' store and opens the attempt with
  // its address; the other node takes it from there.
  auto& zero = one.formed->node_rank == 0 ? one : two;
  auto& other = one.formed->node_rank == 0 ? two : one;
  auto& zero_backend = one.formed->node_rank == 0 ? a : b;
  auto& other_backend = one.formed->node_rank == 0 ? b : a;
  int went = 0;
  zero_backend->before_attempt(0, [&] { ++went; });
  other_backend->before_attempt(0, [&] { ++went; });
  REQUIRE(run_until(
      io, [&] { return went == 2; }, 10s));
  CHECK(zero.hosted_on == zero.formed->host);
  CHECK_FALSE(other.hosted_on);
  CHECK(other_backend->workers_host() == zero.formed->host);
  CHECK(other_backend->workers_port() == zero.store->port());
  a.reset();
  b.reset();
  server0.stop();
  server1.stop();
}

TEST_CASE("rdzv etcd: etcd refuses this node: the rendezvous fails at once, in etcd's words") {
  boost::asio::io_context io;
  FakeStoreOptions etcd_like;
  etcd_like.leases = true;
  FakeStoreHost store(etcd_like);
  const auto config = multi_node(RdzvKind::Etcd);
  FakeJob one;
  auto channels = failing([] {
    throw rz::EtcdDenied("etcd at 127.0.0.1:2379: user 'job' could not log in: etcdserver: authentication failed",
                         "user 'job' could not log in: etcdserver: authentication failed");
  });
  channels.etcd = [&store]() -> std::unique_ptr<cluster::EtcdSession> {
    return std::make_unique<FakeEtcdSession>(store);
  };
  auto a = rdzv::make_backend(io, config, one.side(), std::move(channels));
  const auto began = std::chrono::steady_clock::now();
  a->start(one.hooks());
  REQUIRE(run_until(
      io, [&] { return one.failed.has_value(); }, 5s));
  CHECK(std::chrono::steady_clock::now() - began < 2s);  // not the rendezvous timeout
  CHECK(one.failed->first == EarlyEnd::RendezvousFailed);
  CHECK(one.failed->second ==
        "cannot use etcd at 127.0.0.1:2379: user 'job' could not log in: etcdserver: authentication failed");
}

TEST_CASE("rdzv: make_backend picks by the kind alone; one node is formed at once") {
  boost::asio::io_context io;
  LaunchConfig c;  // RdzvKind::Single
  c.nnodes = 3;    // not what decides
  FakeJob job;
  auto single = rdzv::make_backend(io, c, job.side());
  single->start(job.hooks());
  REQUIRE(job.formed);
  CHECK_FALSE(job.formed->map);
  CHECK(single->where() == "this node");
  c.rdzv = RdzvKind::Static;
  CHECK(rdzv::make_backend(io, c, job.side())->where() == "the store host 127.0.0.1:0");
  c.rdzv = RdzvKind::Etcd;
  c.etcd_settings.host = "etcd1";
  c.etcd_settings.port = 2379;
  CHECK(rdzv::make_backend(io, c, job.side())->where() == "etcd at etcd1:2379");
}
