#include <doctest/doctest.h>
#include <signal.h>

#include "launcher/supervisor_policy.hpp"

using namespace rankrun::launcher;

namespace {
template <class T>
bool has(const std::vector<Action>& actions) {
  for (const auto& a : actions) {
    if (std::holds_alternative<T>(a)) return true;
  }
  return false;
}
int finish_code(const std::vector<Action>& actions) {
  for (const auto& a : actions) {
    if (const auto* f = std::get_if<action::Finish>(&a)) return f->exit_code;
  }
  FAIL("no Finish action");
  return -1;
}
event::WorkerExited exit_of(int rank, ExitStatus st) { return {rank, st}; }
}  // namespace

TEST_CASE("all workers exiting 0 is success") {
  SupervisorPolicy p(3, 0, 30);
  CHECK(p.on(exit_of(0, ExitStatus::exited(0))).empty());
  CHECK(p.on(exit_of(2, ExitStatus::exited(0))).empty());
  CHECK(finish_code(p.on(exit_of(1, ExitStatus::exited(0)))) == 0);
  CHECK(p.phase() == Phase::Done);
}

TEST_CASE("the first failure stops the others: SIGTERM, grace, SIGKILL; its code passes through") {
  SupervisorPolicy p(3, 0, 5);
  auto a = p.on(exit_of(1, ExitStatus::exited(3)));
  REQUIRE(a.size() == 2);
  CHECK(std::get<action::SignalWorkers>(a[0]).signo == SIGTERM);
  CHECK(std::get<action::StartGraceTimer>(a[1]).seconds == 5);
  CHECK(p.root_cause() == 1);
  // a second failure while stopping is not the root cause
  CHECK(p.on(exit_of(0, ExitStatus::killed(SIGTERM))).empty());
  CHECK(p.workers()[0].stopped_by_rankrun);
  CHECK_FALSE(p.workers()[1].stopped_by_rankrun);
  a = p.on(event::GraceExpired{});
  CHECK(has<action::KillWorkers>(a));
  CHECK(p.phase() == Phase::Killing);
  CHECK(finish_code(p.on(exit_of(2, ExitStatus::killed(SIGKILL)))) == 3);
  CHECK(p.root_cause() == 1);
}

TEST_CASE("death by signal gives 128+signal") {
  SupervisorPolicy p(1, 0, 5);
  CHECK(finish_code(p.on(exit_of(0, ExitStatus::killed(SIGSEGV)))) == 128 + SIGSEGV);
}

TEST_CASE("a signal to rankrun is forwarded; a second one kills at once") {
  SupervisorPolicy p(2, 3, 30);
  auto a = p.on(event::SignalReceived{SIGINT});
  CHECK(std::get<action::SignalWorkers>(a[0]).signo == SIGINT);
  CHECK(has<action::StartGraceTimer>(a));
  a = p.on(event::SignalReceived{SIGINT});
  CHECK(has<action::KillWorkers>(a));
  p.on(exit_of(0, ExitStatus::killed(SIGKILL)));
  // no restart after an interruption, even with restarts left
  CHECK(finish_code(p.on(exit_of(1, ExitStatus::killed(SIGKILL)))) == 130);
  CHECK(p.reason() == StopReason::Signal);
}

TEST_CASE("restarts: the whole group restarts until the budget is spent") {
  SupervisorPolicy p(2, 1, 30);
  p.on(exit_of(0, ExitStatus::exited(2)));
  auto a = p.on(exit_of(1, ExitStatus::killed(SIGTERM)));
  REQUIRE(has<action::RestartWorkers>(a));
  CHECK(std::get<action::RestartWorkers>(a[0]).restart_count == 1);
  CHECK(p.phase() == Phase::Restarting);
  CHECK(p.root_cause() == 0);  // still readable for the report
  p.start_next_attempt();
  CHECK(p.restart_count() == 1);
  CHECK(p.phase() == Phase::Running);
  CHECK(p.workers()[0].alive);
  p.on(exit_of(1, ExitStatus::exited(4)));
  CHECK(finish_code(p.on(exit_of(0, ExitStatus::killed(SIGTERM)))) == 4);
}

TEST_CASE("a signal between attempts ends the job") {
  SupervisorPolicy p(1, 2, 30);
  REQUIRE(has<action::RestartWorkers>(p.on(exit_of(0, ExitStatus::exited(1)))));
  CHECK(finish_code(p.on(event::SignalReceived{SIGTERM})) == 128 + SIGTERM);
}

TEST_CASE("a hang stops the job with the hung code") {
  SupervisorPolicy p(2, 5, 1);
  p.on(exit_of(0, ExitStatus::exited(0)));
  auto a = p.on(event::HangDetected{});
  CHECK(std::get<action::SignalWorkers>(a[0]).signo == SIGTERM);
  CHECK(finish_code(p.on(exit_of(1, ExitStatus::killed(SIGTERM)))) == kExitHung);
}

TEST_CASE("stale events are ignored") {
  SupervisorPolicy p(1, 0, 1);
  CHECK(p.on(event::GraceExpired{}).empty());
  CHECK(p.on(exit_of(7, ExitStatus::exited(1))).empty());
  p.on(exit_of(0, ExitStatus::exited(0)));
  CHECK(p.on(exit_of(0, ExitStatus::exited(1))).empty());
}
