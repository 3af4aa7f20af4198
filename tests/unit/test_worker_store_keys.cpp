#include <doctest/doctest.h>

#include "rankrun/store_keys.hpp"

using namespace rankrun;

TEST_CASE("key layout") {
  CHECK(heartbeat_key(3) == "rankrun/hb/3");
  CHECK(collective_record_key(12) == "rankrun/coll/12");
  CHECK(collective_key_base("default", 42) == "rankrun/worker/default/42/");
}

TEST_CASE("heartbeat values round-trip and reject garbage") {
  CHECK(format_heartbeat({1700000000123, 57, std::nullopt, std::nullopt, std::nullopt}) == "1700000000123 57");
  auto parsed = parse_heartbeat("1700000000123 -1");
  REQUIRE(parsed);
  CHECK(parsed->unix_ms == 1700000000123);
  CHECK(parsed->step == -1);
  for (const char* bad : {"", "1", "1 ", " 1", "a 1", "1 b", "1 2 3", "1  2"}) {
    CAPTURE(bad);
    CHECK_FALSE(parse_heartbeat(bad));
  }
}

TEST_CASE("heartbeat values carry the data's count and the section, and an old value still reads") {
  HeartbeatValue value{1700000000123, 1200, 1234, BatchCount{3, 41, 120},
                       SectionValue{1700000000000, 900000, "save model 3"}};
  const std::string text = format_heartbeat(value);
  CHECK(text == "1700000000123 1200 calls=1234 batches=3:41/120 section=1700000000000:900000:save model 3");
  auto parsed = parse_heartbeat(text);
  REQUIRE(parsed);
  CHECK(parsed->step == 1200);
  CHECK(parsed->calls == 1234u);
  REQUIRE(parsed->batches);
  CHECK(parsed->batches->epoch == 3);
  CHECK(parsed->batches->read == 41);
  CHECK(parsed->batches->planned == 120);
  REQUIRE(parsed->section);
  CHECK(parsed->section->since_ms == 1700000000000);
  CHECK(parsed->section->timeout_ms == 900000);
  CHECK(parsed->section->name == "save model 3");

  auto only_section = parse_heartbeat("5 -1 section=4:10:eval");
  REQUIRE(only_section);
  CHECK_FALSE(only_section->batches);
  CHECK(only_section->section->name == "eval");
  auto only_batches = parse_heartbeat("5 7 batches=0:1/2");
  REQUIRE(only_batches);
  CHECK(only_batches->batches->planned == 2);
  CHECK_FALSE(only_batches->section);

  // A name with a newline stays one line; a long one is cut.
  value.section->name = "a\nb" + std::string(300, 'x');
  auto cut = parse_heartbeat(format_heartbeat(value));
  REQUIRE(cut);
  CHECK(cut->section->name.size() == k_max_section_name);
  CHECK(cut->section->name.substr(0, 3) == "a b");

  for (const char* bad :
       {"1 2 batches=", "1 2 batches=1:2", "1 2 batches=1:2/x", "1 2 section=1:2", "1 2 section=x:2:n",
        "1 2 section=1:-5:n", "1 2 other=3", "1 2 batches=0:1/2 other", "1 2 calls=x", "1 2 batches=0:1/2 calls=3"}) {
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
