#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "launcher/report/line_splitter.hpp"

using namespace rankrun::launcher;

TEST_CASE("lines split across reads come out whole") {
  LineSplitter s;
  std::vector<std::string> lines;
  const auto sink = [&](std::string_view l) { lines.emplace_back(l); };
  s.feed("hel", sink);
  s.feed("lo\nwor", sink);
  s.feed("ld\n\nlast", sink);
  CHECK(lines == std::vector<std::string>{"hello", "world", ""});
  s.finish(sink);
  CHECK(lines.back() == "last");
  lines.clear();
  s.finish(sink);
  CHECK(lines.empty());
}

TEST_CASE("over-long lines are passed on in pieces, nothing lost") {
  LineSplitter s(4);
  std::vector<std::string> lines;
  const auto sink = [&](std::string_view l) { lines.emplace_back(l); };
  s.feed("abcdefghij\nxy", sink);
  s.finish(sink);
  CHECK(lines == std::vector<std::string>{"abcd", "efgh", "ij", "xy"});
}

TEST_CASE("torch 2.x's own [rankN]: tag is dropped when it repeats the line's rank") {
  CHECK(without_own_rank_tag("[rank1]: Traceback (most recent call last):", 1) == "Traceback (most recent call last):");
  CHECK(without_own_rank_tag("[rank12]:x", 12) == "x");
  CHECK(without_own_rank_tag("[rank1]: y", 2) == "[rank1]: y");    // another rank's: kept
  CHECK(without_own_rank_tag("[rank1] no colon", 1) == "[rank1] no colon");
  CHECK(without_own_rank_tag("  [rank1]: indented", 1) == "  [rank1]: indented");
  CHECK(without_own_rank_tag("[rank1]:", 1) == "");
  CHECK(without_own_rank_tag("", 0) == "");
}
