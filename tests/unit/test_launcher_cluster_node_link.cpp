// One node's link: to a real store host on loopback (the store's own channel), what it must
// deliver is delivered through a short fault (a store host that is not listening yet, or too
// busy to answer at once), and over a slow link; on the fake store, through the channel a
// backend hands it, the rendezvous completes, the endpoint's refusals end it at once with the
// endpoint's words, and the lease is kept fresh.

#include <doctest/doctest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cluster_fixtures.hpp"
#include "fake_link_store.hpp"
#include "launcher/cluster/lease_watch.hpp"
#include "launcher/cluster/node_link.hpp"
#include "launcher/cluster/records.hpp"
#include "launcher/rdzv/store_backends.hpp"
#include "rendezvous/store_server.hpp"

using namespace rankrun::launcher;
using namespace rankrun::launcher::cluster;
using namespace std::chrono_literals;
using rankrun::launcher::testing::run_until;
namespace rz = rankrun::rendezvous;

namespace {

rz::ServerOptions loopback(std::uint16_t port) {
  rz::ServerOptions o;
  o.bind_address = "127.0.0.1";
  o.port = port;
  return o;
}

// A slow link in front of a store host on loopback: each connection it accepts gets no byte
// through for `lag` (the store's handshake takes that long, as over a link with a long round
// trip), then both directions are relayed as they come.
class SlowLink {
 public:
  SlowLink(std::uint16_t upstream, std::chrono::milliseconds lag) : m_upstream(upstream), m_lag(lag) {
    m_listen = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    REQUIRE(::bind(m_listen, reinterpret_cast<sockaddr*>(&a), len) == 0);
    REQUIRE(::listen(m_listen, 16) == 0);
    REQUIRE(::getsockname(m_listen, reinterpret_cast<sockaddr*>(&a), &len) == 0);
    m_port = ntohs(a.sin_port);
    m_acceptor = std::thread([this] { accept_loop(); });
  }
  ~SlowLink() {
    m_stop = true;
    m_acceptor.join();
    const std::lock_guard lock(m_mutex);
    for (auto& t : m_relays) t.join();
    ::close(m_listen);
  }
  SlowLink(const SlowLink&) = delete;
  SlowLink& operator=(const SlowLink&) = delete;
  std::uint16_t port() const { return m_port; }

 private:
  void accept_loop() {
    while (!m_stop) {
      pollfd p{m_listen, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      const int c = ::accept4(m_listen, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      const std::lock_guard lock(m_mutex);
      m_relays.emplace_back([this, c] { relay(c); });
    }
  }
  void relay(int c) {
    for (auto end = std::chrono::steady_clock::now() + m_lag; std::chrono::steady_clock::now() < end && !m_stop;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    const int u = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(m_upstream);
    if (::connect(u, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) {
      char buf[4096];
      while (!m_stop) {
        pollfd p[2] = {{c, POLLIN, 0}, {u, POLLIN, 0}};
        if (::poll(p, 2, 50) <= 0) continue;
        const int from = (p[0].revents != 0) ? c : u;
        const ssize_t n = ::recv(from, buf, sizeof(buf), 0);
        if (n <= 0 || ::send(from == c ? u : c, buf, static_cast<std::size_t>(n), MSG_NOSIGNAL) != n) break;
      }
    }
    ::close(u);
    ::close(c);
  }

  std::uint16_t m_upstream;
  std::chrono::milliseconds m_lag;
  int m_listen = -1;
  std::uint16_t m_port = 0;
  std::atomic<bool> m_stop{false};
  std::mutex m_mutex;
  std::vector<std::thread> m_relays;
  std::thread m_acceptor;
};

// Node 1 of 2, reaching the store host on loopback `port` over the store's channel.
LinkSettings node_one(std::uint16_t port, std::chrono::milliseconds node_timeout) {
  LaunchConfig config;
  config.rdzv = RdzvKind::Static;
  LinkSettings s;
  s.channel = rdzv::store_channel(config, "127.0.0.1", port);
  s.node_rank = 1;
  s.nnodes = 2;
  s.node_timeout = node_timeout;
  return s;
}

LinkHandlers no_handlers() {
  return LinkHandlers{[](NodeMap, int, std::string, int) {}, [](EarlyEnd, std::string) {}, [](int, StopNotice) {},
                      [](std::string) {}};
}

// Runs `io` until something stops it, or 10 s.
void run_bounded(boost::asio::io_context& io) {
  boost::asio::steady_timer limit(io);
  limit.expires_after(10s);
  limit.async_wait([&](boost::system::error_code ec) {
    if (!ec) io.stop();
  });
  io.run();
}

// The abort node 1 sent is in the store host's agents' key space.
void check_abort_arrived(rz::StoreServer& server) {
  const auto space = server.find_key_space(k_agents_key_space);
  REQUIRE(space);
  const auto complete = server.state(*space).value(k_complete_key);
  REQUIRE(complete);
  CHECK(std::string(*complete) == "abort\nnode 1 failed its checks: no GPU");
}

}  // namespace

TEST_CASE("node link: a message is delivered to a store host that comes up a second late, not dropped") {
  boost::asio::io_context io;
  // A port that was free a moment ago: nothing listens there while the link starts.
  std::uint16_t port = 0;
  {
    rz::StoreServer probe(io, loopback(0));
    port = probe.port();
    probe.stop();
  }
  bool done = false;
  NodeLink link(io, node_one(port, 5s), no_handlers());
  link.start_aborted("node 1 failed its checks: no GPU", [&] {
    done = true;
    io.stop();
  });
  std::unique_ptr<rz::StoreServer> server;
  boost::asio::steady_timer late(io);
  late.expires_after(1s);
  late.async_wait([&](boost::system::error_code) { server = std::make_unique<rz::StoreServer>(io, loopback(port)); });
  run_bounded(io);
  link.stop();
  REQUIRE(done);
  REQUIRE(server);
  check_abort_arrived(*server);
  server->stop();
}

TEST_CASE("node link: a message reaches a store host behind a slow link (its handshake takes 0.4 s)") {
  // A connection to the store takes two round trips; the link's tries to connect lasted 0.2 s
  // whatever --node-timeout was, so over a link with a 300 ms round trip none ever succeeded:
  // the node's "done", its stop notice, its result were dropped while its lease stayed fresh.
  boost::asio::io_context io;
  rz::StoreServer server(io, loopback(0));
  SlowLink slow(server.port(), 400ms);
  bool done = false;
  NodeLink link(io, node_one(slow.port(), 3s), no_handlers());  // a reply may take 1 s
  link.start_aborted("node 1 failed its checks: no GPU", [&] {
    done = true;
    io.stop();
  });
  run_bounded(io);
  link.stop();
  REQUIRE(done);
  check_abort_arrived(server);
  server.stop();
}

TEST_CASE("lease watch: time its own thread did not run is not counted against the nodes; its own node is not timed") {
  // A starved (or paused) store host: the nodes' refreshes wait unread in its sockets. When it
  // runs again it must not call every node lost, itself included.
  boost::asio::io_context io;
  std::vector<int> lost;
  LeaseWatch watch(io, 3, 300ms, LeaseWatch::Hooks{[&](int node) { lost.push_back(node); }, nullptr, nullptr});
  watch.set_self(0);
  watch.start();
  boost::asio::post(io, [] { std::this_thread::sleep_for(700ms); });  // the stall: over two node timeouts
  io.run_one();                                                       // the stall
  io.run_for(150ms);                                                  // the checks that were due meanwhile, and more
  CHECK(lost.empty());
  // Then nobody refreshes: the two other nodes are lost a node timeout later, never node 0.
  io.run_for(600ms);
  CHECK(lost == std::vector<int>{1, 2});
}

// --- on the fake store, through the channel a backend hands the link ---------------------------

namespace {

using rankrun::launcher::testing::FakeStoreHost;

// What one node's link told its Job.
struct Heard {
  std::optional<NodeMap> map;
  int node_rank = -1;
  std::string host;
  std::optional<std::pair<EarlyEnd, std::string>> failed;
  std::optional<std::string> lost;

  LinkHandlers handlers() {
    return LinkHandlers{[this](NodeMap m, int rank, std::string h, int) {
                          map = std::move(m);
                          node_rank = rank;
                          host = std::move(h);
                        },
                        [this](EarlyEnd end, std::string message) { failed.emplace(end, std::move(message)); },
                        [](int, StopNotice) {}, [this](std::string why) { lost = std::move(why); }};
  }
};

// The channel of a node at `address` to the fake store: every connection a new client.
LinkChannel fake_channel(FakeStoreHost& store, std::string address) {
  LinkChannel c;
  c.connect = [&store, address](const LinkConnect&) -> std::unique_ptr<LinkStore> { return store.client(address); };
  c.where = "the fake store";
  c.unreachable_hint = "; check that the fake runs";
  return c;
}

// Node `rank` of a static job of `nnodes` on `channel`.
LinkSettings static_node(LinkChannel channel, int rank, int nnodes, std::chrono::milliseconds node_timeout = 1s) {
  LinkSettings s;
  s.channel = std::move(channel);
  s.node_rank = rank;
  s.nnodes = nnodes;
  s.nproc = 2;
  s.run_id = "job";
  s.rdzv_timeout = 10s;
  s.node_timeout = node_timeout;
  return s;
}

// A connect that fails as a real one does, a moment (up to its timeout) after it began, with
// `kind` at `stage`; `detail` is the message without the endpoint.
[[noreturn]] void fail_connect(const LinkConnect& how, rz::StoreFailure kind, const std::string& detail,
                               rz::StoreStage stage = rz::StoreStage::Connect) {
  std::this_thread::sleep_for(std::min<std::chrono::milliseconds>(how.connect_timeout, 50ms));
  throw rz::StoreError(kind, "the fake store: " + detail, detail, stage);
}

// Node 1 of 2 over `channel`, with a rendezvous timeout of 1 s, run until its rendezvous fails:
// how it failed.
std::pair<EarlyEnd, std::string> rendezvous_failure(boost::asio::io_context& io, const LinkChannel& channel) {
  auto settings = static_node(channel, 1, 2);
  settings.rdzv_timeout = 1s;
  Heard one;
  NodeLink link(io, settings, one.handlers());
  link.start();
  REQUIRE(run_until(io, [&] { return one.failed.has_value(); }));
  link.stop();
  return *one.failed;
}

}  // namespace

TEST_CASE("node link on the fake store: two nodes' static rendezvous completes, each with the same map") {
  FakeStoreHost store;
  boost::asio::io_context io;
  Heard zero, one;
  NodeLink a(io, static_node(fake_channel(store, "10.0.0.1"), 0, 2), zero.handlers());
  NodeLink b(io, static_node(fake_channel(store, "10.0.0.2"), 1, 2), one.handlers());
  a.start();
  b.start();
  REQUIRE(run_until(io, [&] { return zero.map && one.map; }));
  a.stop();
  b.stop();
  CHECK_FALSE(zero.failed);
  CHECK_FALSE(one.failed);
  REQUIRE(zero.map->nodes.size() == 2);
  CHECK(zero.map->nodes[0].host == "10.0.0.1");
  CHECK(zero.map->nodes[1].host == "10.0.0.2");
  CHECK(one.map->nodes[1].host == "10.0.0.2");
  CHECK(zero.node_rank == 0);
  CHECK(one.node_rank == 1);
  CHECK(one.host == "10.0.0.2");  // as the channel's connection sees this node
}

TEST_CASE("node link on the fake store: a refusal the channel calls final ends the rendezvous at once, in its words") {
  boost::asio::io_context io;
  FakeStoreHost store;
  SUBCASE("denied: 'cannot use <where>: <why>', the endpoint not named twice") {
    auto channel = fake_channel(store, "10.0.0.2");
    channel.connect = [](const LinkConnect& how) -> std::unique_ptr<LinkStore> {
      fail_connect(how, rz::StoreFailure::Refused, "user 'job' may not read the job's keys");
    };
    channel.denied = [](const rz::StoreError& e) { return e.kind() == rz::StoreFailure::Refused; };
    Heard one;
    NodeLink link(io, static_node(channel, 1, 2), one.handlers());
    const auto began = std::chrono::steady_clock::now();
    link.start();
    REQUIRE(run_until(io, [&] { return one.failed.has_value(); }));
    link.stop();
    CHECK(std::chrono::steady_clock::now() - began < 2s);  // not the rendezvous timeout (10 s)
    CHECK(one.failed->first == EarlyEnd::RendezvousFailed);
    CHECK(one.failed->second == "cannot use the fake store: user 'job' may not read the job's keys");
  }
  SUBCASE("not a store: the channel's message as it is") {
    auto channel = fake_channel(store, "10.0.0.2");
    channel.connect = [](const LinkConnect& how) -> std::unique_ptr<LinkStore> {
      fail_connect(how, rz::StoreFailure::NotAStore, "it answered the handshake as no store does",
                   rz::StoreStage::Handshake);
    };
    channel.refusal = [](const rz::StoreError& e) -> std::optional<std::string> {
      if (e.kind() != rz::StoreFailure::NotAStore) return std::nullopt;
      return "the job secrets differ: give every node the same secret";
    };
    Heard one;
    NodeLink link(io, static_node(channel, 1, 2), one.handlers());
    link.start();
    REQUIRE(run_until(io, [&] { return one.failed.has_value(); }));
    link.stop();
    CHECK(one.failed->first == EarlyEnd::RendezvousFailed);
    CHECK(one.failed->second == "the job secrets differ: give every node the same secret");
  }
  SUBCASE("a fault that may pass is tried again until the rendezvous timeout, then the channel's hint") {
    auto channel = fake_channel(store, "10.0.0.2");
    std::atomic<int> tries{0};
    channel.connect = [&tries](const LinkConnect& how) -> std::unique_ptr<LinkStore> {
      ++tries;
      fail_connect(how, rz::StoreFailure::Unreachable, "Connection refused");
    };
    channel.denied = [](const rz::StoreError&) { return false; };
    channel.refusal = [](const rz::StoreError&) -> std::optional<std::string> { return std::nullopt; };
    const auto failed = rendezvous_failure(io, channel);
    CHECK(tries > 1);
    CHECK(failed.first == EarlyEnd::RendezvousFailed);
    CHECK(
        failed.second ==
        "could not reach the fake store within the rendezvous timeout (1 s): Connection refused; check that the fake runs");
  }
  SUBCASE("a handshake without a reply is tried again, then said to be a silent host, not a wrong port") {
    auto channel = fake_channel(store, "10.0.0.2");
    std::atomic<int> tries{0};
    channel.connect = [&tries](const LinkConnect& how) -> std::unique_ptr<LinkStore> {
      ++tries;
      fail_connect(how, rz::StoreFailure::NoReply, "handshake failed: no reply within 50 ms",
                   rz::StoreStage::Handshake);
    };
    const auto failed = rendezvous_failure(io, channel);
    CHECK(tries > 1);
    CHECK(failed.first == EarlyEnd::RendezvousFailed);
    CHECK(failed.second ==
          "could not reach the fake store within the rendezvous timeout (1 s): handshake failed: no reply within 50 ms "
          "(something accepts connections there but does not answer: a store host that is stopped or overloaded, or "
          "another program on that port); check that the fake runs");
  }
  SUBCASE("the same words at connect are a refused connection, not a silent host") {
    auto channel = fake_channel(store, "10.0.0.2");
    channel.connect = [](const LinkConnect& how) -> std::unique_ptr<LinkStore> {
      fail_connect(how, rz::StoreFailure::Unreachable, "handshake failed: no reply within 50 ms");
    };
    const auto failed = rendezvous_failure(io, channel);
    CHECK(failed.second ==
          "could not reach the fake store within the rendezvous timeout (1 s): handshake "
          "failed: no reply within 50 ms; check that the fake runs");
  }
}

TEST_CASE("node link on the fake store: after the rendezvous the lease is refreshed every lease interval") {
  FakeStoreHost store;  // the TCP store's way: no leases, the node SETs its lease key
  boost::asio::io_context io;
  Heard zero, one;
  NodeLink a(io, static_node(fake_channel(store, "10.0.0.1"), 0, 2, 1s), zero.handlers());
  NodeLink b(io, static_node(fake_channel(store, "10.0.0.2"), 1, 2, 1s), one.handlers());
  a.start();
  b.start();
  REQUIRE(run_until(io, [&] { return zero.map && one.map; }));
  const int before = store.calls_of("set lease/1");
  std::this_thread::sleep_for(1100ms);  // a lease interval is 0.2 s at --node-timeout 1 s
  const int after = store.calls_of("set lease/1");
  a.stop();
  b.stop();
  CHECK(after - before >= 3);
  CHECK(store.value("lease/1").has_value());
  CHECK_FALSE(one.lost);
}

TEST_CASE(
    "node link on the fake store: a running node's endpoint gone is lost after --node-timeout, a refusal at once") {
  FakeStoreHost store;
  boost::asio::io_context io;
  Heard zero, one;
  auto channel = fake_channel(store, "10.0.0.2");
  std::atomic<bool> deny{false};
  channel.denied = [&deny](const rz::StoreError&) { return deny.load(); };
  NodeLink a(io, static_node(fake_channel(store, "10.0.0.1"), 0, 2, 1500ms), zero.handlers());
  NodeLink b(io, static_node(channel, 1, 2, 1500ms), one.handlers());
  a.start();
  b.start();
  REQUIRE(run_until(io, [&] { return zero.map && one.map; }));
  SUBCASE("a fault: the node waits --node-timeout for its endpoint") {
    const auto lost_at = std::chrono::steady_clock::now();
    store.lose_after(0);
    REQUIRE(run_until(io, [&] { return one.lost.has_value(); }));
    CHECK(std::chrono::steady_clock::now() - lost_at >= 1400ms);
    CHECK(*one.lost == "the store host is gone (lost by the test)");
  }
  SUBCASE("a refusal: at once") {
    const auto lost_at = std::chrono::steady_clock::now();
    deny = true;
    store.lose_after(0);
    REQUIRE(run_until(io, [&] { return one.lost.has_value(); }));
    CHECK(std::chrono::steady_clock::now() - lost_at < 1000ms);
  }
  a.stop();
  b.stop();
}
