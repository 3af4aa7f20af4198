#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "launcher/report/line_splitter.hpp"

using namespace rankrun::launcher;

namespace {
const auto no_progress = [](std::string_view update) { FAIL("a progress update: ", std::string(update)); };
}  // namespace

TEST_CASE("lines split across reads come out whole") {
  LineSplitter s;
  std::vector<std::string> lines;
  const auto sink = [&](std::string_view l) { lines.emplace_back(l); };
  s.feed("hel", sink, no_progress);
  s.feed("lo\nwor", sink, no_progress);
  s.feed("ld\n\nlast", sink, no_progress);
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
  s.feed("abcdefghij\nxy", sink, no_progress);
  s.finish(sink);
  CHECK(lines == std::vector<std::string>{"abcd", "efgh", "ij", "xy"});
}

TEST_CASE("a \\r alone ends a progress update; \\r\\n ends a line, also split across reads") {
  LineSplitter s;
  std::vector<std::string> lines, updates;
  const auto sink = [&](std::string_view l) { lines.emplace_back(l); };
  const auto progress = [&](std::string_view u) { updates.emplace_back(u); };
  // tqdm: "\r" before each state, "\n" when the bar closes.
  s.feed("\r  0%|  | 0/3\r 33%|#", sink, progress);
  s.feed(" | 1/3\r", sink, progress);
  s.feed(" 67%|## | 2/3\r100%|###| 3/3\n", sink, progress);
  CHECK(updates == std::vector<std::string>{"  0%|  | 0/3", " 33%|# | 1/3", " 67%|## | 2/3"});
  CHECK(lines == std::vector<std::string>{"100%|###| 3/3"});
  updates.clear();
  lines.clear();
  // Windows line ends, one split between its "\r" and its "\n".
  s.feed("a\r\nb\r", sink, progress);
  s.feed("\nc\r", sink, progress);
  s.feed("d\n", sink, progress);
  CHECK(lines == std::vector<std::string>{"a", "b", "d"});
  CHECK(updates == std::vector<std::string>{"c"});
  // A stream that ends on a progress update: its last state is a line.
  lines.clear();
  s.feed("50%\r", sink, progress);
  s.finish(sink);
  CHECK(lines == std::vector<std::string>{"50%"});
}

TEST_CASE("over-long progress updates are bounded like lines") {
  LineSplitter s(4);
  std::vector<std::string> lines, updates;
  const auto sink = [&](std::string_view l) { lines.emplace_back(l); };
  const auto progress = [&](std::string_view u) { updates.emplace_back(u); };
  s.feed("abcdefghij\rxy\rz", sink, progress);
  CHECK(lines == std::vector<std::string>{"abcd", "efgh"});
  CHECK(updates == std::vector<std::string>{"ij", "xy"});
}

TEST_CASE("torch 2.x's own [rankN]: tag is dropped when it repeats the line's rank") {
  CHECK(without_own_rank_tag("[rank1]: Traceback (most recent call last):", 1) == "Traceback (most recent call last):");
  CHECK(without_own_rank_tag("[rank12]:x", 12) == "x");
  CHECK(without_own_rank_tag("[rank1]: y", 2) == "[rank1]: y");  // another rank's: kept
  CHECK(without_own_rank_tag("[rank1] no colon", 1) == "[rank1] no colon");
  CHECK(without_own_rank_tag("  [rank1]: indented", 1) == "  [rank1]: indented");
  CHECK(without_own_rank_tag("[rank1]:", 1) == "");
  CHECK(without_own_rank_tag("", 0) == "");
}
