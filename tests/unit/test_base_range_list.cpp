#include <doctest/doctest.h>

#include <vector>

#include "base/range_list.hpp"

using V = std::vector<int>;

TEST_CASE("parse_range_list: numbers and ranges, in the order written") {
  CHECK(rankrun::parse_range_list("0-3,8,10-11", 100) == V{0, 1, 2, 3, 8, 10, 11});
  CHECK(rankrun::parse_range_list("5", 100) == V{5});
  CHECK(rankrun::parse_range_list("8,2", 100) == V{8, 2});
  CHECK(rankrun::parse_range_list("", 100) == V{});
  CHECK(rankrun::parse_range_list("100", 100) == V{100});
}

TEST_CASE("parse_range_list refuses what is not a list of numbers up to max") {
  for (const char* bad : {"3-1", "1,", ",1", "1,,2", "a", "1-", "-1", "1-2-3", " 1", "101", "0-101", "1.5"}) {
    CAPTURE(bad);
    CHECK_FALSE(rankrun::parse_range_list(bad, 100).has_value());
  }
}

TEST_CASE("parse_int_range gives a backwards range as written, for the caller to name") {
  const auto r = rankrun::parse_int_range("7-3", 10);
  REQUIRE(r);
  CHECK(r->first == 7);
  CHECK(r->last == 3);
  CHECK(rankrun::parse_int_range("4", 10)->last == 4);
  CHECK_FALSE(rankrun::parse_int_range("GPU-1", 10));
  CHECK_FALSE(rankrun::parse_int_range("11", 10));
}

TEST_CASE("format_range_list writes the shortest list, and parses back") {
  CHECK(rankrun::format_range_list({0, 1, 2, 3, 8}) == "0-3,8");
  CHECK(rankrun::format_range_list({1, 3, 5}) == "1,3,5");
  CHECK(rankrun::format_range_list({}).empty());
  CHECK(rankrun::parse_range_list(rankrun::format_range_list({0, 1, 4, 5, 6, 9}), 10) == V{0, 1, 4, 5, 6, 9});
}
