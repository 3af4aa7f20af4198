#include <doctest/doctest.h>

#include "rankrun/store_keys.hpp"

using namespace rankrun;

TEST_CASE("key layout") {
  CHECK(heartbeat_key(3) == "rankrun/hb/3");
  CHECK(collective_record_key(12) == "rankrun/coll/12");
  CHECK(collective_key_base("default", 42) == "rankrun/worker/default/42/");
}

TEST_CASE("heartbeat values round-trip and reject garbage") {
  CHECK(format_heartbeat({1700000000123, 57}) == "1700000000123 57");
  auto parsed = parse_heartbeat("1700000000123 -1");
  REQUIRE(parsed);
  CHECK(parsed->unix_ms == 1700000000123);
  CHECK(parsed->step == -1);
  for (const char* bad : {"", "1", "1 ", " 1", "a 1", "1 b", "1 2 3", "1  2"}) {
    CAPTURE(bad);
    CHECK_FALSE(parse_heartbeat(bad));
  }
}

TEST_CASE("collective records round-trip, names may hold spaces") {
  CollectiveRecord record{"all_gather", 42, true, "loss of epoch 3"};
  CHECK(format_collective_record(record) == "all_gather #42 enter loss of epoch 3");
  auto parsed = parse_collective_record("all_gather #42 enter loss of epoch 3");
  REQUIRE(parsed);
  CHECK(parsed->kind == "all_gather");
  CHECK(parsed->seq == 42);
  CHECK(parsed->entered);
  CHECK(parsed->name == "loss of epoch 3");
  auto exited = parse_collective_record("barrier #7 exit epoch-3");
  REQUIRE(exited);
  CHECK_FALSE(exited->entered);
  for (const char* bad :
       {"", "barrier", "barrier 7 enter x", "barrier #x enter x", "barrier #7 left x", "barrier #7 enter"}) {
    CAPTURE(bad);
    CHECK_FALSE(parse_collective_record(bad));
  }
  CHECK(parse_collective_record("barrier #7 enter ")->name.empty());
}
