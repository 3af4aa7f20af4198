#include <doctest/doctest.h>

#include "launcher/cluster/rank_sample.hpp"

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
  const auto s =
      parse_rank_sample("rankrun-sample 1\nseq 1\ntime 1\nchanged 1\nmain_cpu -1\ncpu 0\nin -\nat -\nend 1\n");
  REQUIRE(s);
  CHECK(s->in.empty());
  CHECK(s->at.empty());
  CHECK(s->main_cpu < 0);
}

TEST_CASE("a torn or foreign record is ignored") {
  std::string text = k_sample;
  CHECK_FALSE(parse_rank_sample(text.substr(0, text.size() - 1)));   // cut mid-line
  CHECK_FALSE(parse_rank_sample(text.substr(0, text.find("end"))));  // no end
  std::string torn = text;
  torn.replace(torn.find("end 7"), 5, "end 6");  // older tail
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

// --- the flight recorder's lines ------------------------------------------------------------

namespace {
RankSample with_groups(std::uint64_t seq, double time, double cpu, std::vector<GroupProgress> groups) {
  auto s = sample(seq, time, 0, cpu, cpu);
  s.groups = std::move(groups);
  return s;
}
GroupProgress group(std::string name, std::int64_t enq, std::int64_t started, std::int64_t done, std::string op = {}) {
  std::string desc = op.empty() ? "" : "default_pg";
  return GroupProgress{std::move(name), enq, started, done, std::move(op), std::move(desc)};
}
}  // namespace

TEST_CASE("each process group's collectives are read from the sample") {
  const auto s = parse_rank_sample(
      "rankrun-sample 1\nseq 3\ntime 10\nchanged 9\nmain_cpu 1\ncpu 2\nin -\nat train.py:88 in step\n"
      "pg 0 1042 1041 1041 nccl:all_reduce default_pg\npg 1 7 -1 7 - -\nend 3\n");
  REQUIRE(s);
  REQUIRE(s->groups.size() == 2);
  CHECK(s->groups[0] == GroupProgress{"0", 1042, 1041, 1041, "nccl:all_reduce", "default_pg"});
  CHECK(s->groups[0].pending());
  CHECK(s->groups[1] == GroupProgress{"1", 7, -1, 7, "", ""});
  CHECK_FALSE(s->groups[1].pending());
  CHECK(pending_collective(*s) == "all_reduce #1042");
  CHECK(waits_in(*s) == "all_reduce #1042");  // the stack shows none: the recorder's pending one
  CHECK(describe_collectives(*s) == "all_reduce #1042 not completed");
}

TEST_CASE("a malformed process group line rejects the sample") {
  const std::string head = "rankrun-sample 1\nseq 3\ntime 10\nchanged 9\nmain_cpu 1\ncpu 2\nin -\nat -\n";
  CHECK_FALSE(parse_rank_sample(head + "pg 0 x 1 1 - -\nend 3\n"));
  CHECK_FALSE(parse_rank_sample(head + "pg 0 1 1 1 -\nend 3\n"));
  CHECK_FALSE(parse_rank_sample(head + "pg 0 1 1 1 - - extra\nend 3\n"));
  std::string many = head;
  for (int i = 0; i < 65; ++i) many += "pg " + std::to_string(i) + " 1 1 1 - -\n";
  CHECK_FALSE(parse_rank_sample(many + "end 3\n"));
}

TEST_CASE("a collective that completes or is enqueued is movement, even without CPU or a new stack") {
  const auto before = with_groups(1, 10, 5, {group("0", 10, -1, 10)});
  CHECK(last_moved(before, with_groups(2, 11, 5, {group("0", 11, -1, 11)})) == doctest::Approx(11));
  CHECK(last_moved(before, with_groups(2, 11, 5, {group("0", 11, -1, 10, "gloo:all_reduce")})) == doctest::Approx(11));
  CHECK(last_moved(before, with_groups(2, 11, 5, {group("0", 10, -1, 10), group("1", 1, -1, 1)})) ==
        doctest::Approx(11));
  CHECK(last_moved(before, with_groups(2, 11, 5, {group("0", 10, -1, 10)})) == doctest::Approx(0));
}

TEST_CASE("a rank waiting for its GPU in an NCCL collective does not move by spinning") {
  const auto before = with_groups(1, 10, 5, {group("0", 11, 11, 10, "nccl:all_reduce")});
  // the host thread spins: a whole core, and nothing completes
  const auto spinning = with_groups(2, 11, 6, {group("0", 11, 11, 10, "nccl:all_reduce")});
  CHECK(waits_on_device(before, spinning));
  CHECK(last_moved(before, spinning) == doctest::Approx(0));
  // a gloo collective's CPU is gloo's threads at work: it moves
  const auto gloo_before = with_groups(1, 10, 5, {group("0", 11, -1, 10, "gloo:all_reduce")});
  const auto gloo_now = with_groups(2, 11, 6, {group("0", 11, -1, 10, "gloo:all_reduce")});
  CHECK_FALSE(waits_on_device(gloo_before, gloo_now));
  CHECK(last_moved(gloo_before, gloo_now) == doctest::Approx(11));
  // another group completing is movement
  const auto other = with_groups(2, 11, 6, {group("0", 11, 11, 10, "nccl:all_reduce"), group("1", 3, 3, 3)});
  CHECK_FALSE(
      waits_on_device(with_groups(1, 10, 5, {group("0", 11, 11, 10, "nccl:all_reduce"), group("1", 3, 3, 2)}), other));
}

TEST_CASE("a pending collective of another group is named with its group") {
  RankSample s;
  s.groups = {group("0", 5, -1, 5), GroupProgress{"3", 8, 8, 6, "nccl:broadcast", "tp"}};
  CHECK(pending_collective(s) == "broadcast #7 of group 3");
  CHECK(describe_collectives(s) == "broadcast #7 of group 3 started, not completed");
  s.groups = {group("0", 5, -1, 5)};
  CHECK(pending_collective(s).empty());
  CHECK(describe_collectives(s) == "last completed #5");
  CHECK(op_name("gloo:all_gather") == "all_gather");
}

TEST_CASE("a group that completed none yet says -1: its first collective is #1") {
  const GroupProgress first{"0", 1, -1, -1, "gloo:barrier", "default_pg"};
  CHECK(first.pending());
  CHECK(first.first_pending() == 1);
  CHECK_FALSE((GroupProgress{"0", 0, -1, -1, "", ""}.pending()));
  RankSample s;
  s.groups = {first};
  CHECK(pending_collective(s) == "barrier #1");
}
