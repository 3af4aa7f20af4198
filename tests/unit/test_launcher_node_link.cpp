// One node's link to a real store host on loopback: what it must deliver is delivered through a
// short fault (a store host that is not listening yet, or too busy to answer at once), and over
// a slow link.

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
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>
#include <thread>
#include <vector>

#include "launcher/cluster/lease_watch.hpp"
#include "launcher/cluster/node_link.hpp"
#include "launcher/cluster/records.hpp"
#include "rendezvous/store_server.hpp"

using namespace rankrun::launcher;
using namespace rankrun::launcher::cluster;
using namespace std::chrono_literals;
namespace rdzv = rankrun::rendezvous;

namespace {

rdzv::ServerOptions loopback(std::uint16_t port) {
  rdzv::ServerOptions o;
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

// Node 1 of 2, reaching the store host on loopback `port`.
LinkSettings node_one(std::uint16_t port, std::chrono::milliseconds node_timeout) {
  LinkSettings s;
  s.store_host = "127.0.0.1";
  s.store_port = port;
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
void check_abort_arrived(rdzv::StoreServer& server) {
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
    rdzv::StoreServer probe(io, loopback(0));
    port = probe.port();
    probe.stop();
  }
  bool done = false;
  NodeLink link(io, node_one(port, 5s), no_handlers());
  link.start_aborted("node 1 failed its checks: no GPU", [&] {
    done = true;
    io.stop();
  });
  std::unique_ptr<rdzv::StoreServer> server;
  boost::asio::steady_timer late(io);
  late.expires_after(1s);
  late.async_wait([&](boost::system::error_code) { server = std::make_unique<rdzv::StoreServer>(io, loopback(port)); });
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
  rdzv::StoreServer server(io, loopback(0));
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
  io.run_one();        // the stall
  io.run_for(150ms);   // the checks that were due meanwhile, and more
  CHECK(lost.empty());
  // Then nobody refreshes: the two other nodes are lost a node timeout later, never node 0.
  io.run_for(600ms);
  CHECK(lost == std::vector<int>{1, 2});
}
