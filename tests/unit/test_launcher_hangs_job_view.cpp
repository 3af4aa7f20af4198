#include <doctest/doctest.h>

#include "launcher/hangs/job_view.hpp"

using namespace rankrun::launcher;
using namespace std::chrono_literals;

namespace {
// This node's `n` ranks, started at `t0`, in all_reduce.
std::vector<RankActivity> local_in_all_reduce(std::size_t n, HangTime t0) {
  std::vector<RankActivity> local(n);
  for (auto& r : local) {
    r.started = t0;
    r.in = "all_reduce";
  }
  return local;
}

cluster::RankProgress remote_rank(int rank, double still, std::string in, bool alive = true) {
  cluster::RankProgress r;
  r.rank = rank;
  r.alive = alive;
  r.still_seconds = still;
  r.in = std::move(in);
  r.at = "x.py:1 in f";
  return r;
}
}  // namespace

TEST_CASE("the job's ranks: this node's as watched, the others' as their progress said") {
  const HangTime t0{};
  const HangTime now = t0 + 100s;
  auto local = local_in_all_reduce(2, t0);
  for (auto& r : local) r.last_moved = t0 + 20s;
  ReceivedProgress node1{
      cluster::NodeProgress{1, 0, 7, {remote_rank(2, 70, "all_reduce"), remote_rank(3, 70, "all_reduce")}}, now - 2s};
  const auto all = job_activity(local, {0, 1}, {node1}, 4, t0);
  REQUIRE(all);
  REQUIRE(all->size() == 4);
  CHECK((*all)[2].in == "all_reduce");
  // it last moved 70 s before its node looked, which was 2 s ago
  CHECK(*(*all)[2].last_moved == now - 72s);
  HangTimeouts t;
  t.progress_timeout = Seconds(60);
  const auto f = check_hang(*all, t, now);
  REQUIRE(f);
  CHECK(f->kind == HangKind::Collectives);
  CHECK(f->stuck == std::vector<int>{0, 1, 2, 3});
}

TEST_CASE("a rank working on another node makes the others' wait a straggler's, not a hang") {
  const HangTime t0{};
  const HangTime now = t0 + 100s;
  const auto local = local_in_all_reduce(2, t0);
  ReceivedProgress node1{cluster::NodeProgress{1, 0, 7, {remote_rank(2, 70, "all_reduce"), remote_rank(3, 0.5, "")}},
                         now};
  const auto all = job_activity(local, {0, 1}, {node1}, 4, t0);
  REQUIRE(all);
  HangTimeouts t;
  t.progress_timeout = Seconds(60);
  t.straggler_timeout = Seconds(1800);
  CHECK_FALSE(check_hang(*all, t, now));
  const auto warning = straggler_warning(*all, t, now);
  REQUIRE(warning);
  CHECK(
      warning->find("rank 3 is outside the collectives at x.py:1 in f (working) while ranks 0-2 wait in all_reduce") !=
      std::string::npos);
}

TEST_CASE("no view while a rank of the job is unknown; exited ranks keep their code") {
  const HangTime t0{};
  std::vector<RankActivity> local(1);
  ReceivedProgress node1{cluster::NodeProgress{1, 0, 1, {remote_rank(1, 3, "", false)}}, t0 + 10s};
  node1.progress.ranks[0].exit_code = 0;
  CHECK_FALSE(job_activity(local, {0}, {}, 2, t0));
  const auto all = job_activity(local, {0}, {node1}, 2, t0);
  REQUIRE(all);
  CHECK_FALSE((*all)[1].alive);
  CHECK((*all)[1].exit_code == 0);
  CHECK(*(*all)[1].exited_at == t0 + 7s);
  // ranks out of the job's range are ignored
  ReceivedProgress odd{cluster::NodeProgress{1, 0, 1, {remote_rank(9, 0, "")}}, t0};
  CHECK_FALSE(job_activity(local, {0}, {odd}, 2, t0));
}

TEST_CASE("another node's summary as a dump: the counts, and the op of the pending collective only") {
  auto r = remote_rank(5, 1, "all_reduce");
  CHECK_FALSE(summary_flight(r));  // no recorder there
  r.groups = {GroupProgress{"0", 12, 12, 11, "nccl:all_reduce", "default_pg"}, GroupProgress{"2", 4, 4, 4, "", ""}};
  const auto d = summary_flight(r);
  REQUIRE(d);
  REQUIRE(d->groups.size() == 2);
  CHECK(d->groups[1].completed == 4);
  REQUIRE(d->entries.size() == 1);
  CHECK(d->entries[0].seq == 12);
  CHECK(d->entries[0].op == "all_reduce");
  CHECK(d->entries[0].backend == "nccl");
  CHECK_FALSE(d->entries[0].sizes_known);
  // matched against a dump whose sizes are known, only the ops are compared
  FlightDump local;
  local.groups = {{"0", 12, 12, 11}};
  local.entries = {FlightEntry{"0", "default_pg", 12, "all_reduce", "nccl", "[[4]]", "Float", "started", true}};
  const auto v = match_flight_dumps({{0, local, ""}, {5, d, ""}});
  REQUIRE(v.findings.size() == 1);
  CHECK(v.findings[0].look_first.empty());  // the same op: no one parted
}
