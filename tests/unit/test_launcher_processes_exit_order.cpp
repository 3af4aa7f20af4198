#include <doctest/doctest.h>
#include <sys/wait.h>

#include "launcher/processes/exit_order.hpp"

using namespace rankrun::launcher;
using Clock = std::chrono::steady_clock;

namespace {
int exited_with(int code) { return (code & 0xff) << 8; }  // a waitpid() status word
}  // namespace

TEST_CASE("exits come in the order the workers ended, not in the order waitpid() reaped them") {
  // Rank 2 (pid 300) ended first; ranks 0 and 1 (pids 100, 200) after it, as victims do.
  // waitpid(-1) hands them back lowest pid first.
  const std::vector<pid_t> workers{100, 200, 300};
  const std::vector<ReapedChild> reaped{{100, exited_with(1)}, {200, exited_with(1)}, {300, exited_with(3)}};
  const auto now = Clock::now();
  const auto out = order_exits({300, 100, 200}, workers, reaped, now, {});
  REQUIRE(out.size() == 3);
  CHECK(out[0].slot == 2);
  CHECK(out[0].pid == 300);
  CHECK(out[0].status == ExitStatus::exited(3));
  CHECK(out[1].slot == 0);
  CHECK(out[2].slot == 1);
  // Seen together: rankrun looked late, each time is the latest the rank can have ended.
  for (const auto& e : out) {
    CHECK_FALSE(e.seen.exact);
    CHECK(e.seen.at == now);
  }
}

TEST_CASE("a worker the ready list did not name comes after those it named, and orphans are left out") {
  const std::vector<pid_t> workers{100, -1, 300};
  // 999 is an adopted orphan; 100 exited after the ready list was read (or had no pidfd).
  const std::vector<ReapedChild> reaped{{100, exited_with(0)}, {300, exited_with(2)}, {999, exited_with(0)}};
  const auto out = order_exits({300}, workers, reaped, Clock::now(), {});
  REQUIRE(out.size() == 2);
  CHECK(out[0].slot == 2);
  CHECK(out[1].slot == 0);
}

TEST_CASE("no pidfds at all: the reap order stands") {
  const std::vector<pid_t> workers{100, 200};
  const std::vector<ReapedChild> reaped{{200, exited_with(1)}, {100, exited_with(1)}};
  const auto out = order_exits({}, workers, reaped, Clock::now(), {});
  REQUIRE(out.size() == 2);
  CHECK(out[0].slot == 1);
  CHECK(out[1].slot == 0);
}

TEST_CASE("one exit seen alone is prompt, unless rankrun was just continued after a stop") {
  const std::vector<pid_t> workers{100, 200};
  const std::vector<ReapedChild> reaped{{200, exited_with(1)}};
  const auto now = Clock::now();
  CHECK(order_exits({200}, workers, reaped, now, {}).at(0).seen.exact);
  CHECK(order_exits({200}, workers, reaped, now, now - std::chrono::seconds(5)).at(0).seen.exact);
  CHECK_FALSE(order_exits({200}, workers, reaped, now, now - std::chrono::milliseconds(10)).at(0).seen.exact);
  CHECK_FALSE(order_exits({200}, workers, reaped, now, now - k_after_continue).at(0).seen.exact);
}

TEST_CASE("a ready pid that was not reaped (reaped elsewhere) is skipped") {
  const std::vector<pid_t> workers{100, 200};
  const std::vector<ReapedChild> reaped{{100, exited_with(0)}};
  const auto out = order_exits({200, 100}, workers, reaped, Clock::now(), {});
  REQUIRE(out.size() == 1);
  CHECK(out[0].slot == 0);
  CHECK(out[0].seen.exact);
}

TEST_CASE("exits seen together have their own times when they can only have ended just before the look") {
  const std::vector<pid_t> workers{100, 200};
  const std::vector<ReapedChild> reaped{{100, exited_with(0)}, {200, exited_with(0)}};
  const auto now = Clock::now();
  // rankrun's SIGTERM went out 5 ms ago: both ended after it.
  for (const auto& e : order_exits({100, 200}, workers, reaped, now, {}, now - std::chrono::milliseconds(5)))
    CHECK(e.seen.exact);
  for (const auto& e :
       order_exits({100, 200}, workers, reaped, now, {}, now - k_precise - std::chrono::milliseconds(1)))
    CHECK_FALSE(e.seen.exact);
  // ... but not after a stop.
  for (const auto& e : order_exits({100, 200}, workers, reaped, now, now, now - std::chrono::milliseconds(5)))
    CHECK_FALSE(e.seen.exact);
}

TEST_CASE("a worker's own record of its failure") {
  CHECK(parse_failure_time("1795795731061000000\n") == 1795795731061000000LL);
  CHECK(parse_failure_time("1795795731061000000") == 1795795731061000000LL);
  CHECK_FALSE(parse_failure_time(""));
  CHECK_FALSE(parse_failure_time("\n"));
  CHECK_FALSE(parse_failure_time("17957957x"));
  CHECK_FALSE(parse_failure_time("-5\n"));
  CHECK_FALSE(parse_failure_time("99999999999999999999999\n"));

  using SysClock = std::chrono::system_clock;
  const SysClock::time_point started{std::chrono::seconds(1'800'000'000)};
  const auto ns = [&started](double seconds_after) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(started.time_since_epoch()).count() +
           static_cast<std::int64_t>(seconds_after * 1e9);
  };
  const auto ended_by = started + std::chrono::seconds(4);
  CHECK(own_failure_seconds(ns(1.25), started, ended_by).value() == doctest::Approx(1.25));
  CHECK_FALSE(own_failure_seconds(std::nullopt, started, ended_by));
  CHECK_FALSE(own_failure_seconds(ns(-30), started, ended_by));  // a record of an earlier process
  CHECK_FALSE(own_failure_seconds(ns(60), started, ended_by));   // after rankrun saw it end
  CHECK(own_failure_seconds(ns(-0.5), started, ended_by).value() == 0.0);
}

TEST_CASE("within a round, the ranks' records of their failures order them") {
  // A Python rank closed its sockets before its process ended (its DataLoader's workers were
  // being joined): its victims ended first, but recorded their failures after its own.
  const std::vector<pid_t> workers{100, 200, 300, 400};
  const std::vector<ReapedChild> reaped{
      {100, exited_with(1)}, {400, exited_with(0)}, {200, exited_with(1)}, {300, exited_with(1)}};
  auto round = order_exits({100, 400, 200, 300}, workers, reaped, Clock::now(), {});
  const auto recorded = [](pid_t pid) -> std::optional<std::int64_t> {
    if (pid == 100) return 2310;
    if (pid == 200) return 2320;
    if (pid == 300) return 2090;
    return std::nullopt;  // 400 exited 0: never asked
  };
  order_by_records(round, recorded);
  REQUIRE(round.size() == 4);
  CHECK(round[0].slot == 2);  // recorded first, at the first recorded place
  CHECK(round[1].slot == 3);  // the exit that recorded nothing keeps its place
  CHECK(round[2].slot == 0);
  CHECK(round[3].slot == 1);

  // An exit with no record keeps its place ahead of those with one.
  auto mixed = order_exits({100, 200, 300}, {100, 200, 300},
                           {{100, exited_with(1)}, {200, exited_with(1)}, {300, exited_with(1)}}, Clock::now(), {});
  order_by_records(mixed, [](pid_t pid) -> std::optional<std::int64_t> {
    if (pid == 100) return std::nullopt;
    return pid == 200 ? 50 : 10;
  });
  CHECK(mixed[0].slot == 0);
  CHECK(mixed[1].slot == 2);
  CHECK(mixed[2].slot == 1);
}
