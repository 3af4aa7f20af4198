#include <doctest/doctest.h>

#include "launcher/hangs/rank_sample.hpp"

using namespace rankrun::launcher;

namespace {
const char* k_sample =
    "rankrun-sample 1\nseq 7\ntime 100.500\nchanged 95.000\nmain_cpu 3.250\ncpu 9.000\nin all_reduce\n"
    "at train.py:12 in step\nend 7\n";

RankSample sample(std::uint64_t seq, double time, double changed, double main_cpu, double cpu) {
  RankSample s;
  s.seq = seq;
  s.time = time;
  s.changed = changed;
  s.main_cpu = main_cpu;
  s.cpu = cpu;
  return s;
}
}  // namespace

TEST_CASE("a sampler's record is read whole") {
  const auto s = parse_rank_sample(k_sample);
  REQUIRE(s);
  CHECK(s->seq == 7);
  CHECK(s->time == doctest::Approx(100.5));
  CHECK(s->changed == doctest::Approx(95));
  CHECK(s->main_cpu == doctest::Approx(3.25));
  CHECK(s->cpu == doctest::Approx(9));
  CHECK(s->in == "all_reduce");
  CHECK(s->at == "train.py:12 in step");
}

TEST_CASE("'-' means none") {
  const auto s = parse_rank_sample("rankrun-sample 1\nseq 1\ntime 1\nchanged 1\nmain_cpu -1\ncpu 0\nin -\nat -\nend 1\n");
  REQUIRE(s);
  CHECK(s->in.empty());
  CHECK(s->at.empty());
  CHECK(s->main_cpu < 0);
}

TEST_CASE("a torn or foreign record is ignored") {
  std::string text = k_sample;
  CHECK_FALSE(parse_rank_sample(text.substr(0, text.size() - 1)));                    // cut mid-line
  CHECK_FALSE(parse_rank_sample(text.substr(0, text.find("end"))));                   // no end
  std::string torn = text;
  torn.replace(torn.find("end 7"), 5, "end 6");                                       // older tail
  CHECK_FALSE(parse_rank_sample(torn));
  std::string bad = text;
  bad.replace(bad.find("cpu 9.000"), 9, "cpu nine!");
  CHECK_FALSE(parse_rank_sample(bad));
  CHECK_FALSE(parse_rank_sample("rankrun-sample 2\nseq 7\nend 7\n"));
  CHECK_FALSE(parse_rank_sample(""));
  CHECK_FALSE(parse_rank_sample(std::string(20000, 'x')));
}

TEST_CASE("a rank moves when its stack changes or it uses CPU") {
  // The stack changed at 95: that is when it last moved, whatever came before.
  CHECK(last_moved(std::nullopt, sample(2, 100, 95, 1, 1)) == doctest::Approx(95));
  // Still: the same stack, no CPU to speak of.
  const auto before = sample(1, 90, 80, 1.00, 5.00);
  CHECK(last_moved(before, sample(2, 100, 80, 1.01, 5.05)) == doctest::Approx(80));
  // Its main thread ran (Python between small all_reduces): it moved now.
  CHECK(last_moved(before, sample(2, 100, 80, 1.30, 5.30)) == doctest::Approx(100));
  // Only other threads ran (a large gloo collective): it moved now.
  CHECK(last_moved(before, sample(2, 100, 80, 1.00, 7.00)) == doctest::Approx(100));
  // The same sample read twice says nothing new.
  CHECK(last_moved(before, before) == doctest::Approx(80));
}
