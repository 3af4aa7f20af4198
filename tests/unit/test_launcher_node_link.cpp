// One node's link to a real store host on loopback: what it must deliver is delivered through a
// short fault (a store host that is not listening yet, or too busy to answer at once).

#include <doctest/doctest.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <memory>
#include <string>

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
  LinkSettings s;
  s.store_host = "127.0.0.1";
  s.store_port = port;
  s.node_rank = 1;
  s.nnodes = 2;
  s.node_timeout = 5s;
  bool done = false;
  NodeLink link(io, s, LinkHandlers{[](NodeMap, int, std::string, int) {}, [](int, std::string) {},
                                    [](int, StopNotice) {}, [](std::string) {}});
  link.start_aborted("node 1 failed its checks: no GPU", [&] {
    done = true;
    io.stop();
  });
  std::unique_ptr<rdzv::StoreServer> server;
  boost::asio::steady_timer late(io);
  late.expires_after(1s);
  late.async_wait([&](boost::system::error_code) { server = std::make_unique<rdzv::StoreServer>(io, loopback(port)); });
  boost::asio::steady_timer limit(io);
  limit.expires_after(10s);
  limit.async_wait([&](boost::system::error_code ec) {
    if (!ec) io.stop();
  });
  io.run();
  link.stop();
  REQUIRE(done);
  REQUIRE(server);
  const auto space = server->find_key_space(k_agents_key_space);
  REQUIRE(space);
  const auto complete = server->state(*space).value(k_complete_key);
  REQUIRE(complete);
  CHECK(std::string(*complete) == "abort\nnode 1 failed its checks: no GPU");
  server->stop();
}
