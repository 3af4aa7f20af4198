#include <doctest/doctest.h>

#include "launcher/cluster/progress.hpp"
#include "launcher/cluster/records.hpp"

using namespace rankrun::launcher;
using namespace rankrun::launcher::cluster;

namespace {
NodeProgress two_ranks() {
  NodeProgress p;
  p.node_rank = 2;
  p.attempt = 1003;
  p.seq = 41;
  RankProgress a;
  a.rank = 8;
  a.still_seconds = 9.5;
  a.in = "all_reduce";
  a.at = "train.py:12 in step";
  a.groups = {GroupProgress{"0", 1042, -1, 1041, "gloo:all_reduce", "default_pg"}, GroupProgress{"3", 7, 7, 7, "", ""}};
  RankProgress b;
  b.rank = 9;
  b.alive = false;
  b.exit_code = 0;
  b.still_seconds = 0.25;
  p.ranks = {a, b};
  return p;
}
}  // namespace

TEST_CASE("a node's progress goes whole through its record") {
  const auto p = two_ranks();
  const auto text = encode(p);
  CHECK(text.rfind("rankrun-progress/1\nnode=2\nattempt=1003\nseq=41\n", 0) == 0);
  const auto back = decode_progress(text);
  REQUIRE(back);
  CHECK(back->node_rank == 2);
  CHECK(back->attempt == 1003);
  CHECK(back->seq == 41);
  REQUIRE(back->ranks.size() == 2);
  CHECK(back->ranks[0].rank == 8);
  CHECK(back->ranks[0].alive);
  CHECK_FALSE(back->ranks[0].exit_code);
  CHECK(back->ranks[0].still_seconds == doctest::Approx(9.5));
  CHECK(back->ranks[0].in == "all_reduce");
  CHECK(back->ranks[0].at == "train.py:12 in step");
  CHECK(back->ranks[0].groups == p.ranks[0].groups);
  CHECK_FALSE(back->ranks[1].alive);
  CHECK(back->ranks[1].exit_code == 0);
  CHECK(back->ranks[1].in.empty());
  CHECK(progress_key(1003, 2) == "progress/1003/2");
}

TEST_CASE("a field cannot break the record: tabs and line ends are blanked, lengths cut") {
  auto p = two_ranks();
  p.ranks[0].at = "weird\tfile\nname.py:1 in f";
  p.ranks[0].in = std::string(1000, 'x');
  const auto back = decode_progress(encode(p));
  REQUIRE(back);
  CHECK(back->ranks[0].at == "weird file name.py:1 in f");
  CHECK(back->ranks[0].in.size() == 256);
}

TEST_CASE("the record stays bounded: groups go first, then where ranks are") {
  NodeProgress p;
  for (int r = 0; r < 64; ++r) {
    RankProgress rp;
    rp.rank = r;
    rp.at = std::string(200, 'a');
    for (int g = 0; g < 20; ++g)
      rp.groups.push_back(GroupProgress{std::to_string(g), 5, 5, g == 19 ? 4 : 5, "nccl:x", "d"});
    p.ranks.push_back(rp);
  }
  const auto text = encode(p);
  CHECK(text.size() <= k_max_progress_record);
  const auto back = decode_progress(text);
  REQUIRE(back);
  CHECK(back->ranks.size() == 64);
  // at most 8 groups a rank, the pending one among them
  if (!back->ranks[0].groups.empty()) {
    CHECK(back->ranks[0].groups.size() <= k_max_groups_per_rank);
    CHECK(back->ranks[0].groups.front().pending());
  }
}

TEST_CASE("a malformed progress record is refused") {
  CHECK_FALSE(decode_progress(""));
  CHECK_FALSE(decode_progress("rankrun-progress/2\nnode=1\nattempt=0\n"));
  CHECK_FALSE(decode_progress("rankrun-progress/1\nattempt=0\n"));  // no node
  CHECK_FALSE(decode_progress("rankrun-progress/1\nnode=-1\nattempt=0\n"));
  CHECK_FALSE(decode_progress("rankrun-progress/1\nnode=1\nattempt=0"));                     // cut short
  CHECK_FALSE(decode_progress("rankrun-progress/1\nnode=1\nattempt=0\nrank=1\t1\t-\t5\n"));  // fields missing
  CHECK_FALSE(decode_progress("rankrun-progress/1\nnode=1\nattempt=0\nrank=1\t2\t-\t5\t-\t-\n"));
  CHECK_FALSE(decode_progress("rankrun-progress/1\nnode=1\nattempt=0\ngroup=3\t0\t1\t1\t1\t-\t-\n"));  // no such rank
  CHECK_FALSE(decode_progress(std::string(k_max_progress_record + 1, 'x')));
  // unknown keys are a newer rankrun's
  CHECK(decode_progress("rankrun-progress/1\nnode=1\nattempt=0\nfuture=yes\n"));
}

TEST_CASE("a hang's notice carries the report the other nodes print") {
  StopNotice n;
  n.kind = StopKind::Hang;
  n.node_rank = 0;
  n.host = "10.0.0.1";
  n.report = "rankrun: HANG: ranks 0-5 ...\nrankrun: verdict: rank 0 in barrier\n";
  const auto back = decode_notice(encode(n));
  REQUIRE(back);
  CHECK(back->report == n.report);
}
