#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "base/text.hpp"

TEST_CASE("trim_blanks and trim_space take what is at the ends, nothing inside") {
  CHECK(rankrun::trim_blanks("  a b\t") == "a b");
  CHECK(rankrun::trim_blanks(" \t ").empty());
  CHECK(rankrun::trim_blanks("x\n") == "x\n");  // a line end is not a blank
  CHECK(rankrun::trim_space("\r\n 8-15\n") == "8-15");
  CHECK(rankrun::trim_space("").empty());
}

TEST_CASE("printable: the first bytes, the unprintable ones replaced, '...' when cut") {
  CHECK(rankrun::printable("ok") == "ok");
  CHECK(rankrun::printable(std::string("a\0b\n\x7f\xff", 6)) == "a?b???");
  CHECK(rankrun::printable("abcdef", 3) == "abc...");
  CHECK(rankrun::printable("abc", 3) == "abc");
  CHECK(rankrun::printable("\x01\x02", 2, '.') == "..");
}

TEST_CASE("split_at keeps the empty pieces") {
  using V = std::vector<std::string>;
  CHECK(rankrun::split_at("a,,b", ',') == V{"a", "", "b"});
  CHECK(rankrun::split_at("", ',') == V{""});
  CHECK(rankrun::split_at("a,", ',') == V{"a", ""});
  CHECK(rankrun::split_at("a:b", ',') == V{"a:b"});
}

TEST_CASE("format_bytes: MiB under a GiB, GiB with one decimal from one up") {
  CHECK(rankrun::format_bytes(512u << 20) == "512 MiB");
  CHECK(rankrun::format_bytes(std::uint64_t{9342000000}) == "8.7 GiB");
  CHECK(rankrun::format_bytes(1ull << 30) == "1.0 GiB");
  CHECK(rankrun::format_bytes(0) == "0 MiB");
}
