// rendezvous/port_owner: the pure parsing of /proc/net/tcp{,6} and fd links, on sample text in
// the kernel's format (little-endian host, as on every machine torch runs on).

#include <doctest/doctest.h>

#include "rendezvous/port_owner.hpp"

using namespace rankrun::rendezvous;

namespace {

constexpr const char* k_tcp =
    "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
    "   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 12345 1 "
    "0000000000000000 100 0 0 10 0\n"
    "   1: 0100007F:9C40 0100007F:1F90 01 00000000:00000000 00:00000000 00000000  1000        0 555 1 "
    "0000000000000000 20 4 30 10 -1\n"
    "   2: 0A00A8C0:0016 6400A8C0:D431 06 00000000:00000000 03:00001234 00000000     0        0 0 3 "
    "0000000000000000\n"
    "garbage line\n";

constexpr const char* k_tcp6 =
    "  sl  local_address                         remote_address                        st tx_queue rx_queue tr "
    "tm->when retrnsmt   uid  timeout inode\n"
    "   0: 00000000000000000000000000000000:1F90 00000000000000000000000000000000:0000 0A 00000000:00000000 "
    "00:00000000 00000000     0        0 777 1 0000000000000000 100 0 0 10 0\n"
    "   1: 0000000000000000FFFF00000100007F:A000 0000000000000000FFFF00000100007F:1F90 01 00000000:00000000 "
    "00:00000000 00000000     0        0 888 1 0000000000000000 20 4 30 10 -1\n"
    "   2: 00000000000000000000000001000000:0050 00000000000000000000000001000000:C000 01 00000000:00000000 "
    "00:00000000 00000000     0        0 999 1 0000000000000000 20 4 30 10 -1\n";

}  // namespace

TEST_CASE("port_owner: parses /proc/net/tcp") {
  auto entries = parse_proc_net_tcp(k_tcp, false);
  REQUIRE(entries.size() == 3);
  CHECK(entries[0].local_ip == "127.0.0.1");
  CHECK(entries[0].local_port == 8080);
  CHECK(entries[0].remote_ip == "0.0.0.0");
  CHECK(entries[0].state == k_tcp_listen);
  CHECK(entries[0].inode == 12345);
  CHECK(entries[1].local_port == 40000);
  CHECK(entries[1].remote_port == 8080);
  CHECK(entries[1].state == k_tcp_established);
  CHECK(entries[1].inode == 555);
  CHECK(entries[2].local_ip == "192.168.0.10");
  CHECK(entries[2].local_port == 22);
  CHECK(entries[2].remote_ip == "192.168.0.100");
  CHECK(entries[2].inode == 0);
}

TEST_CASE("port_owner: parses /proc/net/tcp6, printing IPv4-mapped addresses as IPv4") {
  auto entries = parse_proc_net_tcp(k_tcp6, true);
  REQUIRE(entries.size() == 3);
  CHECK(entries[0].local_ip == "::");
  CHECK(entries[0].local_port == 8080);
  CHECK(entries[0].state == k_tcp_listen);
  CHECK(entries[0].inode == 777);
  CHECK(entries[1].local_ip == "127.0.0.1");
  CHECK(entries[1].remote_ip == "127.0.0.1");
  CHECK(entries[1].remote_port == 8080);
  CHECK(entries[2].local_ip == "::1");
  CHECK(entries[2].local_port == 80);
  CHECK(entries[2].remote_port == 0xC000);
}

TEST_CASE("port_owner: the IPv4 table read as IPv6 (and the reverse) yields nothing") {
  CHECK(parse_proc_net_tcp(k_tcp, true).empty());
  CHECK(parse_proc_net_tcp(k_tcp6, false).empty());
  CHECK(parse_proc_net_tcp("", false).empty());
}

TEST_CASE("port_owner: socket links and canonical addresses") {
  CHECK(parse_socket_link("socket:[12345]") == 12345u);
  CHECK_FALSE(parse_socket_link("socket:[]"));
  CHECK_FALSE(parse_socket_link("socket:[12a]"));
  CHECK_FALSE(parse_socket_link("pipe:[12345]"));
  CHECK_FALSE(parse_socket_link("/dev/null"));
  CHECK(canonical_ip("::ffff:127.0.0.1") == "127.0.0.1");
  CHECK(canonical_ip("0:0:0:0:0:0:0:1") == "::1");
  CHECK(canonical_ip("10.1.2.3") == "10.1.2.3");
  CHECK(canonical_ip("not-an-ip") == "not-an-ip");
}
