#include <doctest/doctest.h>

#include "base/host_port.hpp"

using rankrun::split_host_port;
using rankrun::SplitHostPort;

TEST_CASE("host_port and bracketed write an endpoint, IPv6 in brackets") {
  CHECK(rankrun::host_port("10.0.0.1", 29500) == "10.0.0.1:29500");
  CHECK(rankrun::host_port("fd00::1", 29500) == "[fd00::1]:29500");
  CHECK(rankrun::host_port("node-7.cluster", 0) == "node-7.cluster:0");
  CHECK(rankrun::bracketed("::1") == "[::1]");
  CHECK(rankrun::bracketed("localhost") == "localhost");
}

TEST_CASE("split_host_port reads HOST[:PORT] and [V6][:PORT]") {
  auto s = split_host_port("node1:29400");
  CHECK(s.host == "node1");
  CHECK(s.port == "29400");
  s = split_host_port("node1");
  CHECK(s.host == "node1");
  CHECK_FALSE(s.port);
  s = split_host_port("node1:");
  CHECK(s.port == "");
  s = split_host_port("[fd00::1]:29400");
  CHECK(s.host == "fd00::1");
  CHECK(s.port == "29400");
  s = split_host_port("[fd00::1]");
  CHECK(s.host == "fd00::1");
  CHECK_FALSE(s.port);
  s = split_host_port("fd00::1");  // IPv6 without brackets: a host alone
  CHECK(s.host == "fd00::1");
  CHECK_FALSE(s.port);
  CHECK(split_host_port("[fd00::1:29400").problem == SplitHostPort::Problem::NoClosingBracket);
  CHECK(split_host_port("[fd00::1]x").problem == SplitHostPort::Problem::JunkAfterBracket);
  CHECK(split_host_port("").host.empty());
  // and back: what host_port writes splits into what it was given
  s = split_host_port(rankrun::host_port("fd00::7", 80));
  CHECK(s.host == "fd00::7");
  CHECK(s.port == "80");
}

TEST_CASE("without_v4_mapping shows an IPv4 client of a dual-stack socket as IPv4") {
  CHECK(rankrun::without_v4_mapping("::ffff:10.0.0.1") == "10.0.0.1");
  CHECK(rankrun::without_v4_mapping("::ffff:fe80::1") == "::ffff:fe80::1");
  CHECK(rankrun::without_v4_mapping("fd00::1") == "fd00::1");
  CHECK(rankrun::without_v4_mapping("10.0.0.2") == "10.0.0.2");
}
