#include <doctest/doctest.h>

#include "cluster_fixtures.hpp"
#include "launcher/cluster/peer_failure.hpp"

using rankrun::launcher::cluster::NodeMap;
using rankrun::launcher::cluster::peer_node_named;
using rankrun::launcher::testing::three_nodes;

TEST_CASE("gloo's and NCCL's lost connections name the peer's node") {
  const auto m = three_nodes();
  CHECK(peer_node_named({"RuntimeError: [./gloo/transport/tcp/pair.cc:598] Connection closed by peer [10.0.0.3]:417"},
                        m, 0) == 2);
  CHECK(
      peer_node_named({"RuntimeError: [./gloo/transport/tcp/pair.cc:589] Read error [10.0.0.2]:15073: Connection reset "
                       "by peer"},
                      m, 0) == 1);
  CHECK(peer_node_named(
            {"misc/socket.cc:47 NCCL WARN socketProgress: Connection closed by remote peer 10.0.0.3<45134>"}, m, 1) ==
        2);
}

TEST_CASE("a failure that names no other node's address is the node's own") {
  const auto m = three_nodes();
  // This node's own peer (another local rank that failed first) is not another node.
  CHECK_FALSE(peer_node_named({"RuntimeError: Connection closed by peer [10.0.0.1]:417"}, m, 0));
  // No connection loss: an address in an ordinary error means nothing.
  CHECK_FALSE(peer_node_named({"ValueError: cannot parse 10.0.0.3"}, m, 0));
  CHECK_FALSE(peer_node_named({"Traceback (most recent call last):", "ZeroDivisionError: division by zero"}, m, 0));
  CHECK_FALSE(peer_node_named({}, m, 0));
}

TEST_CASE("an address is matched whole, not as part of a longer one") {
  NodeMap m;
  m.nodes = {{0, "10.0.0.1", 1, 0}, {1, "10.0.0.3", 1, 1}};
  CHECK_FALSE(peer_node_named({"Connection closed by peer [10.0.0.31]:417"}, m, 0));
  CHECK_FALSE(peer_node_named({"Connection closed by peer [110.0.0.3]:417"}, m, 0));
  CHECK(peer_node_named({"Connection closed by peer [10.0.0.3]:417"}, m, 0) == 1);
}

TEST_CASE("the last connection-loss line decides") {
  const auto m = three_nodes();
  CHECK(peer_node_named({"Connection reset by peer [10.0.0.2]:1", "Connection closed by peer [10.0.0.3]:2", "at exit"},
                        m, 0) == 2);
}
