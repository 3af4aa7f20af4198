// The options' own value parsers (launcher/config/options.cpp): stream specs, ${local_rank},
// endpoints, filter lists, the store's bind address. A case that also runs resolve() is in
// test_launcher_config_resolve.cpp (parse_signal_name and parse_stop_signals with
// --preempt-signal and --signals-to-handle, strip_stray_quotes with --rdzv-conf).

#include <doctest/doctest.h>

#include "launcher/config/options.hpp"
#include "launcher/types/launch_error.hpp"

using namespace rankrun::launcher;

TEST_CASE("redirect and tee specs") {
  auto s = parse_stream_spec("--redirects", "3");
  CHECK(s.for_rank(5).out);
  CHECK(s.for_rank(5).err);
  s = parse_stream_spec("--tee", "0:1,1:2");
  CHECK(s.for_rank(0).out);
  CHECK_FALSE(s.for_rank(0).err);
  CHECK(s.for_rank(1).err);
  CHECK_FALSE(s.for_rank(2).out);
  CHECK(s.any());
  CHECK_FALSE(parse_stream_spec("-r", "0").any());
  CHECK_THROWS_WITH_AS(parse_stream_spec("--redirects", "4"), doctest::Contains("--redirects='4'"), LaunchError);
  CHECK_THROWS_WITH_AS(parse_stream_spec("--tee", "0:1,x"), doctest::Contains("--tee='0:1,x'"), LaunchError);
}

TEST_CASE("${local_rank} is substituted in script arguments") {
  CHECK(substitute_local_rank({"--out=${local_rank}.log", "${local_rank}${local_rank}", "x"}, 3) ==
        std::vector<std::string>{"--out=3.log", "33", "x"});
}

TEST_CASE("elastic: parse_endpoint and endpoint_is_local") {
  CHECK(parse_endpoint("--rdzv-endpoint", "h") == std::pair<std::string, int>{"h", 0});
  CHECK(parse_endpoint("--rdzv-endpoint", "h:5") == std::pair<std::string, int>{"h", 5});
  CHECK(parse_endpoint("--rdzv-endpoint", "::1") == std::pair<std::string, int>{"::1", 0});
  CHECK(parse_endpoint("--rdzv-endpoint", "[::1]:7") == std::pair<std::string, int>{"::1", 7});
  CHECK_THROWS_WITH_AS(parse_endpoint("--rdzv-endpoint", ":5"), doctest::Contains("names no host"), LaunchError);
  CHECK_THROWS_WITH_AS(parse_endpoint("--rdzv-endpoint", "[::1"), doctest::Contains("no closing ']'"), LaunchError);
  const std::vector<std::string> mine{"127.0.0.1", "10.0.0.2", "fd00::2"};
  const std::vector<std::string> names{"localhost", "node2"};
  CHECK(endpoint_is_local("10.0.0.2", {"10.0.0.2"}, mine, names));
  CHECK(endpoint_is_local("node2", {}, mine, names));
  CHECK_FALSE(endpoint_is_local("10.0.0.1", {"10.0.0.1"}, mine, names));
  // A name that resolves to one of this machine's interfaces (not the one in the host name).
  CHECK(endpoint_is_local("trainer-a", {"10.0.0.2"}, mine, names));
  // A name resolving to loopback here says nothing about which node it is.
  CHECK_FALSE(endpoint_is_local("node1", {"127.0.1.1", "127.0.0.1"}, mine, names));
  CHECK(endpoint_is_local("localhost", {"127.0.0.1"}, mine, names));
}

TEST_CASE("--duplicate-*-filters: comma-separated, a doubled comma is one") {
  CHECK(parse_filter_list("").empty());
  CHECK(parse_filter_list("loss") == std::vector<std::string>{"loss"});
  CHECK(parse_filter_list("loss,acc,,") == std::vector<std::string>{"loss", "acc,"});
  CHECK(parse_filter_list("a,,b,c") == std::vector<std::string>{"a,b", "c"});
  CHECK(parse_filter_list(",x,") == std::vector<std::string>{"x"});
}

TEST_CASE("an elastic store host whose endpoint is loopback listens on every interface, as torch's store") {
  LaunchConfig c;
  c.rdzv = RdzvKind::C10d;
  c.nnodes = 2;
  c.master_addr = "localhost";  // TorchX's node 0: ${TORCHX_RANK0_HOST:=localhost}
  CHECK(store_bind_address(c) == "::");
  c.master_addr = "127.0.0.1";
  CHECK(store_bind_address(c) == "::");
  c.master_addr = "10.0.0.1";
  CHECK(store_bind_address(c) == "10.0.0.1");
  c.master_addr = "localhost";
  c.nnodes = 1;  // one node: nobody else to reach it
  CHECK(store_bind_address(c) == "localhost");
  c.nnodes = 2;
  c.rdzv = RdzvKind::Static;  // every node names the same node 0: loopback means one machine
  CHECK(store_bind_address(c) == "localhost");
}
