#include <doctest/doctest.h>

#include <cstdint>

#include "base/parse_number.hpp"

using rankrun::parse_number;

TEST_CASE("parse_number reads the whole text as one number") {
  CHECK(parse_number<int>("42") == 42);
  CHECK(parse_number<int>("-7") == -7);
  CHECK(parse_number<std::uint64_t>("18446744073709551615") == UINT64_MAX);
  CHECK(parse_number<unsigned>("ff", 16) == 255u);
}

TEST_CASE("parse_number refuses anything but one number that fits") {
  for (const char* text : {"", " 1", "1 ", "+1", "1x", "0x10", "--1", "1.5", "-"}) {
    CAPTURE(text);
    CHECK_FALSE(parse_number<int>(text).has_value());
  }
  CHECK_FALSE(parse_number<unsigned>("-1").has_value());
  CHECK_FALSE(parse_number<std::int8_t>("128").has_value());
  CHECK_FALSE(parse_number<int>("99999999999").has_value());
}

TEST_CASE("parse_number into a variable leaves it alone on a refusal") {
  int out = 5;
  CHECK_FALSE(parse_number("x", out));
  CHECK(out == 5);
  CHECK(parse_number("12", out));
  CHECK(out == 12);
}
