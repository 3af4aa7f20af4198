#include <doctest/doctest.h>

#include "launcher/hangs/hang_policy.hpp"

using namespace rankrun::launcher;
using namespace std::chrono_literals;

namespace {
const HangTime t0 = HangTime{} + 1000s;
std::vector<RankActivity> ranks(int n) {
  std::vector<RankActivity> r(static_cast<std::size_t>(n));
  for (auto& x : r) x.started = t0;
  return r;
}
void exit_ok(RankActivity& r, HangTime at) {
  r.alive = false;
  r.exit_code = 0;
  r.exited_at = at;
}
}  // namespace

TEST_CASE("nothing can hang without timeouts or conditions") {
  auto r = ranks(2);
  CHECK_FALSE(next_check(r, {}).has_value());
  HangTimeouts t;
  t.exit_timeout = 10s;
  CHECK_FALSE(next_check(r, t).has_value());  // nobody exited yet
  CHECK_FALSE(check_hang(r, t, t0 + 1h).has_value());
}

TEST_CASE("a straggler is found exit-timeout after the first rank exited 0") {
  auto r = ranks(3);
  HangTimeouts t;
  t.exit_timeout = 30s;
  exit_ok(r[0], t0 + 5s);
  exit_ok(r[2], t0 + 7s);
  CHECK(next_check(r, t) == t0 + 35s);
  CHECK_FALSE(check_hang(r, t, t0 + 34s));
  const auto f = check_hang(r, t, t0 + 35s);
  REQUIRE(f);
  CHECK(f->kind == HangKind::Straggler);
  CHECK(f->stuck == std::vector<int>{1});
  CHECK(f->reason == "ranks 0,2 exited 0 30s ago; rank 1 still running (--exit-timeout=30s)");
  r[1].alive = false;  // everyone gone: no hang
  CHECK_FALSE(check_hang(r, t, t0 + 1h));
}

TEST_CASE("a failed exit is not a straggler condition") {
  auto r = ranks(2);
  HangTimeouts t;
  t.exit_timeout = 1s;
  r[0].alive = false;
  r[0].exit_code = 3;
  r[0].exited_at = t0;
  CHECK_FALSE(check_hang(r, t, t0 + 1h));
}

TEST_CASE("heartbeats: only ranks that heartbeat can lose it") {
  auto r = ranks(3);
  HangTimeouts t;
  t.heartbeat_timeout = 10s;
  CHECK_FALSE(next_check(r, t));
  r[0].last_heartbeat = t0 + 20s;
  r[1].last_heartbeat = t0 + 2s;
  CHECK(next_check(r, t) == t0 + 12s);
  const auto f = check_hang(r, t, t0 + 13s);
  REQUIRE(f);
  CHECK(f->kind == HangKind::HeartbeatLost);
  CHECK(f->stuck == std::vector<int>{1});
}

TEST_CASE("collectives: every running rank blocked in one for --progress-timeout is a hang") {
  auto r = ranks(2);
  HangTimeouts t;
  t.progress_timeout = 60s;
  CHECK_FALSE(next_check(r, t));  // nobody is known to be in a collective
  r[0].in = "barrier";
  CHECK_FALSE(next_check(r, t));  // rank 1 is outside: not this condition
  r[1].in = "all_reduce";
  CHECK(next_check(r, t) == t0 + 60s);
  r[0].last_heartbeat = t0 + 55s;  // a heartbeat is not movement
  CHECK(next_check(r, t) == t0 + 60s);
  r[0].last_moved = t0 + 10s;  // its stack changed, or it used CPU
  CHECK(next_check(r, t) == t0 + 70s);
  r[1].last_output = t0 + 50s;
  CHECK(next_check(r, t) == t0 + 110s);
  CHECK_FALSE(check_hang(r, t, t0 + 100s));
  const auto f = check_hang(r, t, t0 + 110s);
  REQUIRE(f);
  CHECK(f->kind == HangKind::Collectives);
  CHECK(f->stuck == std::vector<int>{0, 1});
  CHECK(f->reason ==
        "ranks 0,1 have been blocked in collectives (rank 1 in all_reduce, rank 0 in barrier) for 60s "
        "(--progress-timeout=60s)");
}

TEST_CASE("collectives: a rank that exited does not count; the others still hang") {
  auto r = ranks(2);
  HangTimeouts t;
  t.progress_timeout = 30s;
  exit_ok(r[0], t0 + 5s);
  r[1].in = "all_reduce";
  r[1].last_moved = t0 + 4s;
  const auto f = check_hang(r, t, t0 + 34s);
  REQUIRE(f);
  CHECK(f->kind == HangKind::Collectives);
  CHECK(f->reason == "rank 1 has been blocked in all_reduce for 30s (--progress-timeout=30s)");
}

TEST_CASE("a busy job is never a hang, however long its collectives") {
  auto r = ranks(2);
  HangTimeouts t;
  t.progress_timeout = 10s;
  t.straggler_timeout = 20s;
  for (auto& x : r) x.in = "all_reduce";
  for (int s = 0; s < 3600; s += 5) {
    for (auto& x : r) x.last_moved = t0 + std::chrono::seconds(s);  // CPU or a new call every look
    CHECK_FALSE(check_hang(r, t, t0 + std::chrono::seconds(s + 5)));
  }
}

TEST_CASE("an outsider: warned about while it works, a hang only after --straggler-timeout") {
  auto r = ranks(3);
  HangTimeouts t;
  t.progress_timeout = 30s;
  t.straggler_timeout = 300s;
  r[1].in = "barrier";
  r[2].in = "barrier";
  r[0].at = "ckpt.py:40 in save";
  CHECK(straggler_warning_interval(t) == 10s);
  CHECK_FALSE(straggler_warning(r, t, t0 + 9s));
  r[0].last_moved = t0 + 11s;  // writing
  const auto w = straggler_warning(r, t, t0 + 12s);
  REQUIRE(w);
  CHECK(*w ==
        "straggler: rank 0 is outside the collectives at ckpt.py:40 in save (working) while ranks 1,2 wait in "
        "barrier for 12s; a hang after --straggler-timeout=300s");
  CHECK_FALSE(check_hang(r, t, t0 + 299s));  // the collectives' timeout does not apply
  const auto f = check_hang(r, t, t0 + 300s);
  REQUIRE(f);
  CHECK(f->kind == HangKind::Outsider);
  CHECK(f->stuck == std::vector<int>{0});
  CHECK(f->reason ==
        "ranks 1,2 have been blocked in barrier for 300s while rank 0 is outside any collective "
        "(--straggler-timeout=300s)");
  // Still, and blocked: the warning says so.
  const auto still = straggler_warning(r, t, t0 + 100s);
  REQUIRE(still);
  CHECK(still->find("rank 0 is outside the collectives at ckpt.py:40 in save (not moving for 89s)") !=
        std::string::npos);
  // The waiters moved on: no warning.
  r[1].in.clear();
  r[2].in.clear();
  CHECK_FALSE(straggler_warning(r, t, t0 + 100s));
}

TEST_CASE("the warning interval is a third of --progress-timeout, between 1 and 60 seconds") {
  HangTimeouts t;
  CHECK(straggler_warning_interval(t) == 60s);
  t.progress_timeout = 180s;
  CHECK(straggler_warning_interval(t) == 60s);
  t.progress_timeout = 9s;
  CHECK(straggler_warning_interval(t) == 3s);
  t.progress_timeout = 1s;
  CHECK(straggler_warning_interval(t) == 1s);
}

TEST_CASE("late arrival at the rendezvous") {
  auto r = ranks(4);
  HangTimeouts t;
  t.init_timeout = 20s;
  CHECK_FALSE(next_check(r, t));  // nobody arrived: nobody waits
  r[0].rendezvoused_at = t0 + 1s;
  r[1].rendezvoused_at = t0 + 2s;
  r[2].rendezvoused_at = t0 + 3s;
  CHECK(next_check(r, t) == t0 + 21s);
  const auto f = check_hang(r, t, t0 + 21s);
  REQUIRE(f);
  CHECK(f->kind == HangKind::LateArrival);
  CHECK(f->stuck == std::vector<int>{3});
  CHECK(f->reason.find("rank 3 never reached the rendezvous; ranks 0-2 waited there") == 0);
  r[3].rendezvoused_at = t0 + 10s;
  CHECK_FALSE(check_hang(r, t, t0 + 1h));
}

TEST_CASE("the reason names global ranks: local rank + the node's first rank") {
  auto r = ranks(2);
  HangTimeouts t;
  t.exit_timeout = 30s;
  exit_ok(r[0], t0 + 5s);
  const auto f = check_hang(r, t, t0 + 40s, 6);
  REQUIRE(f);
  CHECK(f->stuck == std::vector<int>{1});  // local
  CHECK(f->reason.find("rank 6 exited 0") == 0);
  CHECK(f->reason.find("rank 7 still running") != std::string::npos);
}

TEST_CASE("ranks in init_process_group that never reach rankrun's store: a rendezvous elsewhere") {
  auto r = ranks(2);
  r[0].in = "init_process_group";
  r[1].in = "init_process_group";
  const std::vector<bool> none{false, false};
  CHECK_FALSE(foreign_rendezvous_warning(r, none, 30s, t0 + 29s));
  const auto w = foreign_rendezvous_warning(r, none, 30s, t0 + 31s, 4);
  REQUIRE(w);
  CHECK(w->find("ranks 4,5 have been in init_process_group for 31s and none connected to rankrun's store: the script "
                "sets MASTER_ADDR/MASTER_PORT itself") == 0);
  CHECK_FALSE(foreign_rendezvous_warning(r, {false, true}, 30s, t0 + 31s));  // one reached it: the rendezvous is ours
  r[0].in.clear();
  r[1].in = "barrier";
  CHECK_FALSE(foreign_rendezvous_warning(r, none, 30s, t0 + 1h));  // past init_process_group
}

TEST_CASE("a rank inside a section it declared is working until the section's timeout") {
  auto r = ranks(2);
  HangTimeouts t;
  t.progress_timeout = 60s;
  t.straggler_timeout = 120s;
  t.heartbeat_timeout = 30s;
  // Rank 1 waits in a barrier from t0; rank 0 checkpoints for up to 900 s, beating before it.
  r[1].in = "barrier";
  r[0].last_heartbeat = t0;
  r[0].section = RankSection{"checkpoint", t0, 900s};
  CHECK_FALSE(check_hang(r, t, t0 + 899s));  // neither stillness, silence nor the outsider counts
  const auto warning = straggler_warning(r, t, t0 + 412s);
  REQUIRE(warning);
  CHECK(warning->find("rank 0 is in section 'checkpoint' for 412s of 900s while rank 1 waits in barrier") !=
        std::string::npos);
  const auto f = check_hang(r, t, t0 + 900s);
  REQUIRE(f);
  CHECK(f->kind == HangKind::SectionOverrun);
  CHECK(f->stuck == std::vector<int>{0});
  CHECK(f->reason == "rank 0 in section 'checkpoint' for 900s of 900s: past the timeout the section declared");
  CHECK(next_check(r, t) <= t0 + 900s);

  // Without the section, the same silence is a lost heartbeat at 30 s.
  r[0].section.reset();
  const auto lost = check_hang(r, t, t0 + 30s);
  REQUIRE(lost);
  CHECK(lost->kind == HangKind::HeartbeatLost);
}

TEST_CASE("a section keeps the exit clock and the collectives' clock from counting") {
  auto r = ranks(2);
  HangTimeouts t;
  t.exit_timeout = 30s;
  t.progress_timeout = 60s;
  exit_ok(r[1], t0);
  r[0].section = RankSection{"final eval", t0, 300s};
  CHECK_FALSE(check_hang(r, t, t0 + 299s));
  r[0].section->timeout = 10s;  // a short section: the straggler clock counts from its end
  const auto f = check_hang(r, t, t0 + 41s);
  REQUIRE(f);
}

TEST_CASE("the wait a section caused starts over when the section ends") {
  auto r = ranks(2);
  HangTimeouts t;
  t.straggler_timeout = 3s;
  r[1].in = "barrier";  // waiting since t0
  r[0].section_ended = t0 + 9s;
  CHECK_FALSE(check_hang(r, t, t0 + 10s));  // not at once: the section ended a second ago
  const auto f = check_hang(r, t, t0 + 12s);
  REQUIRE(f);
  CHECK(f->kind == HangKind::Outsider);
}
