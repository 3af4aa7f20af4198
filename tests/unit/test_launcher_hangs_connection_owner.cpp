#include <doctest/doctest.h>

#include "launcher/hangs/connection_owner.hpp"

using namespace rankrun::launcher;

namespace {
// Rank 0's client end 127.0.0.1:40000 is socket 7; rank 1 holds socket 8 (127.0.0.1:40001).
SocketMapping two_ranks() {
  SocketMapping m;
  m.read = true;
  m.inode_of[{"127.0.0.1", 40000}] = 7;
  m.inode_of[{"127.0.0.1", 40001}] = 8;
  m.inode_of[{"10.0.0.2", 40002}] = 9;
  m.rank_of_inode[7] = 0;
  m.rank_of_inode[8] = 1;
  return m;
}
}  // namespace

TEST_CASE("connection owner: the rank whose fd table holds the client end") {
  const auto m = two_ranks();
  CHECK(owner_of_connection(m, "127.0.0.1", 40000, false) == 0);
  CHECK(owner_of_connection(m, "127.0.0.1", 40001, true) == 1);
}

TEST_CASE("connection owner: a client end held by no worker, while every worker lives, is not a worker's") {
  auto m = two_ranks();
  m.rank_of_inode.erase(8);  // another process of this host (a worker's child, a tool)
  CHECK(owner_of_connection(m, "127.0.0.1", 40001, false) == k_connection_unknown);
  // Another node's worker on node 0's store.
  CHECK(owner_of_connection(m, "10.0.0.2", 40002, true) == k_connection_unknown);
}

TEST_CASE("connection owner: a rank that exited between the two tables is gone, not someone else's") {
  // The socket table still listed its client end; by the fd tables its process had exited (and
  // no connection had been matched to it), so the close the store is about to see is a rank's.
  auto m = two_ranks();
  m.rank_of_inode.erase(7);
  m.gone = {0};
  CHECK(owner_of_connection(m, "127.0.0.1", 40000, true) == k_connection_gone);
  // Every exited rank already matched to a connection: the client end is someone else's.
  CHECK(owner_of_connection(m, "127.0.0.1", 40000, false) == k_connection_unknown);
}

TEST_CASE("connection owner: a client end already gone from the socket table was closed by its process") {
  const auto m = two_ranks();
  CHECK(owner_of_connection(m, "127.0.0.1", 40005, false) == k_connection_gone);
  CHECK(owner_of_connection(m, "::1", 40005, false) == k_connection_gone);
  // Only loopback connections are this host's workers'.
  CHECK(owner_of_connection(m, "10.0.0.3", 40005, true) == k_connection_unknown);
  // A failed look tells nothing.
  CHECK(owner_of_connection(SocketMapping{}, "127.0.0.1", 40005, true) == k_connection_unknown);
}
