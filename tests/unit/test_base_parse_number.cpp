#include <doctest/doctest.h>

#include <cstdint>
#include <string>

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

TEST_CASE("parse_decimal reads one finite decimal number, all of the text") {
  using rankrun::parse_decimal;
  CHECK(parse_decimal("30") == 30.0);
  CHECK(parse_decimal("-1.5") == -1.5);
  CHECK(parse_decimal("2e-3") == 2e-3);
  CHECK(parse_decimal(".5") == 0.5);
  CHECK(parse_decimal("1721234567.125") == 1721234567.125);
  for (const char* text : {"", " 1", "1 ", "1s", "0x10", "inf", "nan", "-", ".", "e5", "1e999", "1,5", "\t2"}) {
    CAPTURE(text);
    CHECK_FALSE(parse_decimal(text).has_value());
  }
  CHECK_FALSE(parse_decimal(std::string(65, '1')).has_value());  // bounded
}

TEST_CASE("parse_byte_size: every spelling of a size in bytes, units powers of 1024") {
  using rankrun::parse_byte_size;
  CHECK(parse_byte_size("512M") == (512ull << 20));
  CHECK(parse_byte_size("4G") == (4ull << 30));
  CHECK(parse_byte_size("1048576") == 1048576ull);
  CHECK(parse_byte_size("1048576B") == 1048576ull);
  CHECK(parse_byte_size("2048K") == (2ull << 20));
  CHECK(parse_byte_size("2048k") == (2ull << 20));
  CHECK(parse_byte_size("2048KiB") == (2ull << 20));
  CHECK(parse_byte_size("3MiB") == (3ull << 20));
  CHECK(parse_byte_size("2GiB") == (2ull << 30));
  CHECK(parse_byte_size("1T") == (1ull << 40));
  CHECK(parse_byte_size("1TiB") == (1ull << 40));
  CHECK(parse_byte_size("0512M") == (512ull << 20));  // decimal, not octal
  CHECK(parse_byte_size("512m") == (512ull << 20));
  CHECK(parse_byte_size("1GB") == (1ull << 30));
  CHECK(parse_byte_size("1gib") == (1ull << 30));
  CHECK(parse_byte_size("1Mi") == (1ull << 20));
  CHECK(parse_byte_size("1P") == (1ull << 50));
  CHECK(parse_byte_size("15E") == (15ull << 60));
  CHECK(parse_byte_size("0") == 0ull);
  for (const char* bad : {"2X", "-1G", "+5M", "99999999999999999999T", "99999999999999999999", "16E", "16777216T",
                          "0x10M", "1.5G", "512 M", " 512M", "M", "", "1iB", "1KiiB", "1BB", "1MK"}) {
    CAPTURE(bad);
    CHECK_FALSE(parse_byte_size(bad).has_value());
  }
}
