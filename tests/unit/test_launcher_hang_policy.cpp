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

TEST_CASE("no progress: output or a step keeps the job alive, a heartbeat does not") {
  auto r = ranks(2);
  HangTimeouts t;
  t.progress_timeout = 60s;
  CHECK(next_check(r, t) == t0 + 60s);
  r[0].last_heartbeat = t0 + 55s;
  CHECK(next_check(r, t) == t0 + 60s);
  r[0].last_progress = t0 + 10s;
  CHECK(next_check(r, t) == t0 + 70s);
  r[1].last_output = t0 + 50s;
  CHECK(next_check(r, t) == t0 + 110s);
  CHECK_FALSE(check_hang(r, t, t0 + 100s));
  const auto f = check_hang(r, t, t0 + 110s);
  REQUIRE(f);
  CHECK(f->kind == HangKind::NoProgress);
  CHECK(f->stuck == std::vector<int>{0, 1});
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
