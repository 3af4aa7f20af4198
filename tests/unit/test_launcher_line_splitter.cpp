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
