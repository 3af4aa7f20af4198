#include <doctest/doctest.h>

#include "worker_runtime/collective_protocol.hpp"

using namespace rankrun::worker;
using std::chrono::milliseconds;

TEST_CASE("arrival values carry header and payload, payload may hold newlines") {
  const std::string value = format_arrival(collective_header("all_gather", "x"), "a\nb");
  auto arrival = parse_arrival(value);
  CHECK(arrival.header == "all_gather 'x'");
  CHECK(arrival.payload == "a\nb");
  CHECK(parse_arrival("barrier 'b'").payload.empty());
}

TEST_CASE("rank lists") {
  CHECK(format_rank_list({2}) == "2");
  CHECK(format_rank_list({3, 2}) == "2,3");
  CHECK(format_rank_list({0, 1, 2, 3, 7}) == "0-3,7");
  CHECK(format_rank_list({1, 3, 4, 5, 6, 9, 10}) == "1,3-6,9,10");
}

TEST_CASE("timeout messages name the missing ranks") {
  CHECK(timeout_message("barrier", "epoch-3", 5, milliseconds(5000), {2, 3}, 4) ==
        "barrier 'epoch-3' (#5) timed out after 5s: ranks 2,3 of 4 did not arrive");
  CHECK(timeout_message("all_gather", "g", 1, milliseconds(1500), {0}, 2) ==
        "all_gather 'g' (#1) timed out after 1500ms: rank 0 of 2 did not arrive");
  CHECK(timeout_message("barrier", "b", 1, milliseconds(1000), {}, 2).find("all 2 ranks arrived") != std::string::npos);
}

TEST_CASE("mismatch descriptions name who called what") {
  CHECK_FALSE(describe_mismatch({"barrier 'a'", "barrier 'a'", "barrier 'a'"}));
  CHECK_FALSE(describe_mismatch({}));
  auto mismatch = describe_mismatch({"barrier 'a'", "barrier 'a'", "all_gather 'b'", "barrier 'a'"});
  REQUIRE(mismatch);
  CHECK(*mismatch == "ranks 0,1,3 called barrier 'a'; rank 2 called all_gather 'b'");
}
