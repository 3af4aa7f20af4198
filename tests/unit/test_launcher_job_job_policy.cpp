#include <doctest/doctest.h>
#include <signal.h>

#include "launcher/job/job_policy.hpp"

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
JobPolicy policy(int workers, int max_restarts, double term_timeout) {
  JobLimits l;
  l.max_restarts = max_restarts;
  l.term_timeout = term_timeout;
  l.kill_timeout = 2.5;
  l.term_signal = SIGTERM;
  JobPolicy p(workers, l);
  p.on(event::AttemptStarted{});  // the first attempt's workers run
  return p;
}
// The last worker's exit asks for the cleanup; its answer decides.
std::vector<Action> cleaned(JobPolicy& p, bool unkillable = false) { return p.on(event::CleanedUp{unkillable}); }
}  // namespace

TEST_CASE("all workers exiting 0 is success, after the cleanup") {
  auto p = policy(3, 0, 30);
  CHECK(p.on(exit_of(0, ExitStatus::exited(0))).empty());
  CHECK(p.on(exit_of(2, ExitStatus::exited(0))).empty());
  auto a = p.on(exit_of(1, ExitStatus::exited(0)));
  REQUIRE(a.size() == 1);
  CHECK(has<action::CleanUp>(a));
  CHECK(p.phase() == Phase::CleaningUp);
  CHECK(finish_code(cleaned(p)) == 0);
  CHECK(p.phase() == Phase::Done);
}

TEST_CASE("the first failure stops the others: SIGTERM, grace, SIGKILL with its deadline; its code passes through") {
  auto p = policy(3, 0, 5);
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
  REQUIRE(a.size() == 2);
  CHECK(std::get<action::KillWorkers>(a[0]).grace_expired);
  CHECK(std::get<action::KillWorkers>(a[0]).stop_signal == SIGTERM);
  CHECK(std::get<action::StartKillTimer>(a[1]).seconds == 2.5);
  CHECK(p.phase() == Phase::Killing);
  CHECK(has<action::CleanUp>(p.on(exit_of(2, ExitStatus::killed(SIGKILL)))));
  CHECK(finish_code(cleaned(p)) == 3);
  CHECK(p.root_cause() == 1);
  CHECK_FALSE(p.gave_up());
}

TEST_CASE("a worker alive past the kill deadline: give up, clean up, exit 125") {
  auto p = policy(2, 3, 1);
  p.on(exit_of(0, ExitStatus::exited(1)));
  p.on(event::GraceExpired{});
  auto a = p.on(event::KillDeadlinePassed{});
  CHECK(has<action::CleanUp>(a));
  CHECK(p.gave_up());
  CHECK(p.workers()[1].alive);
  // no restart, even with restarts left
  CHECK(finish_code(cleaned(p)) == k_exit_unkillable);
}

TEST_CASE("the kill deadline after every worker exited changes nothing") {
  auto p = policy(1, 0, 1);
  p.on(event::SignalReceived{SIGTERM});
  p.on(event::GraceExpired{});
  p.on(exit_of(0, ExitStatus::killed(SIGKILL)));
  CHECK(p.on(event::KillDeadlinePassed{}).empty());
  CHECK(finish_code(cleaned(p)) == 128 + SIGTERM);
}

TEST_CASE("a process that survives the cleanup makes the job exit 125, even after success") {
  auto p = policy(1, 0, 1);
  p.on(exit_of(0, ExitStatus::exited(0)));
  CHECK(finish_code(cleaned(p, true)) == k_exit_unkillable);
  CHECK(p.gave_up());
}

TEST_CASE("death by signal gives 128+signal") {
  auto p = policy(1, 0, 5);
  CHECK(has<action::CleanUp>(p.on(exit_of(0, ExitStatus::killed(SIGSEGV)))));
  CHECK(finish_code(cleaned(p)) == 128 + SIGSEGV);
}

TEST_CASE("a signal to rankrun is forwarded; a second one kills at once") {
  auto p = policy(2, 3, 30);
  auto a = p.on(event::SignalReceived{SIGINT});
  CHECK(std::get<action::SignalWorkers>(a[0]).signo == SIGINT);
  CHECK(has<action::StartGraceTimer>(a));
  a = p.on(event::SignalReceived{SIGINT});
  REQUIRE(has<action::KillWorkers>(a));
  CHECK_FALSE(std::get<action::KillWorkers>(a[0]).grace_expired);
  CHECK(has<action::StartKillTimer>(a));
  p.on(exit_of(0, ExitStatus::killed(SIGKILL)));
  p.on(exit_of(1, ExitStatus::killed(SIGKILL)));
  // no restart after an interruption, even with restarts left
  CHECK(finish_code(cleaned(p)) == 130);
  CHECK(p.reason() == StopReason::Signal);
}

TEST_CASE("the grace after a forwarded Ctrl-C followed SIGINT, not SIGTERM") {
  auto p = policy(2, 0, 5);
  p.on(event::SignalReceived{SIGINT});
  auto a = p.on(event::GraceExpired{});
  REQUIRE(has<action::KillWorkers>(a));
  CHECK(std::get<action::KillWorkers>(a[0]).grace_expired);
  CHECK(std::get<action::KillWorkers>(a[0]).stop_signal == SIGINT);
}

TEST_CASE("restarts: the whole group restarts until the budget is spent") {
  auto p = policy(2, 1, 30);
  p.on(exit_of(0, ExitStatus::exited(2)));
  CHECK(has<action::CleanUp>(p.on(exit_of(1, ExitStatus::killed(SIGTERM)))));
  CHECK(p.root_cause() == 0);  // still readable while cleaning up
  auto a = cleaned(p);
  REQUIRE(a.size() == 1);
  const auto start = std::get<action::StartAttempt>(a[0]);
  CHECK(start.restart_count == 1);
  CHECK(start.failed_local_rank == 0);
  CHECK(start.failed_status == ExitStatus::exited(2));
  CHECK(p.restart_count() == 1);
  // Until the next attempt's workers start (multi-node: after the barrier) nothing runs.
  CHECK(p.phase() == Phase::Waiting);
  CHECK_FALSE(p.workers()[0].alive);
  CHECK(p.on(exit_of(1, ExitStatus::exited(9))).empty());  // a late exit of the old attempt
  p.on(event::AttemptStarted{});
  CHECK(p.phase() == Phase::Running);
  CHECK(p.workers()[0].alive);
  CHECK_FALSE(p.root_cause());
  p.on(exit_of(1, ExitStatus::exited(4)));
  p.on(exit_of(0, ExitStatus::killed(SIGTERM)));
  CHECK(finish_code(cleaned(p)) == 4);
}

TEST_CASE("a signal between attempts ends the job") {
  auto p = policy(1, 2, 30);
  REQUIRE(has<action::CleanUp>(p.on(exit_of(0, ExitStatus::exited(1)))));
  CHECK(p.on(event::SignalReceived{SIGTERM}).empty());
  CHECK(finish_code(cleaned(p)) == 128 + SIGTERM);
}

TEST_CASE("a signal during the cleanup of a successful job leaves it a success") {
  auto p = policy(1, 0, 30);
  p.on(exit_of(0, ExitStatus::exited(0)));
  p.on(event::SignalReceived{SIGINT});
  CHECK(finish_code(cleaned(p)) == 0);
}

TEST_CASE("a hang stops the job with the hung code") {
  auto p = policy(2, 5, 1);
  p.on(exit_of(0, ExitStatus::exited(0)));
  auto a = p.on(event::HangDetected{});
  CHECK(std::get<action::SignalWorkers>(a[0]).signo == SIGTERM);
  p.on(exit_of(1, ExitStatus::killed(SIGTERM)));
  CHECK(finish_code(cleaned(p)) == k_exit_hung);
}

TEST_CASE("stale events are ignored") {
  auto p = policy(1, 0, 1);
  CHECK(p.on(event::GraceExpired{}).empty());
  CHECK(p.on(event::KillDeadlinePassed{}).empty());
  CHECK(p.on(event::CleanedUp{false}).empty());
  CHECK(p.on(exit_of(7, ExitStatus::exited(1))).empty());
  p.on(exit_of(0, ExitStatus::exited(0)));
  CHECK(p.on(exit_of(0, ExitStatus::exited(1))).empty());
  cleaned(p);
  CHECK(p.on(event::SignalReceived{SIGTERM}).empty());
}

TEST_CASE("multi-node: another node's failure stops the workers and gives its exit code") {
  auto p = policy(2, 0, 30);
  auto a = p.on(event::JobStop{StopReason::Remote, 3, true});
  CHECK(has<action::SignalWorkers>(a));
  CHECK(p.reason() == StopReason::Remote);
  p.on(exit_of(0, ExitStatus::killed(SIGTERM)));
  a = p.on(exit_of(1, ExitStatus::killed(SIGTERM)));
  CHECK(has<action::CleanUp>(a));
  CHECK(finish_code(cleaned(p)) == 3);
}

TEST_CASE("multi-node: the notice's code wins over this node's own later failure") {
  auto p = policy(2, 0, 30);
  p.on(exit_of(0, ExitStatus::exited(7)));                           // this node's own failure...
  CHECK(p.on(event::JobStop{StopReason::Remote, 3, true}).empty());  // ...but another node's came first
  p.on(exit_of(1, ExitStatus::killed(SIGTERM)));
  CHECK(finish_code(cleaned(p)) == 3);
}

TEST_CASE("multi-node: success everywhere finishes 0; a second notice changes nothing") {
  auto p = policy(1, 0, 30);
  p.on(exit_of(0, ExitStatus::exited(0)));
  CHECK(p.on(event::JobStop{StopReason::None, 0, false}).empty());
  CHECK(p.on(event::JobStop{StopReason::StoreHostLost, k_exit_store_host_lost, false}).empty());
  CHECK(finish_code(cleaned(p)) == 0);
}

TEST_CASE("multi-node: a lost node or store host stops without restart; a remote failure restarts") {
  auto lost = policy(1, 5, 30);
  lost.on(event::JobStop{StopReason::NodeLost, k_exit_node_lost, false});
  lost.on(exit_of(0, ExitStatus::killed(SIGTERM)));
  CHECK(finish_code(cleaned(lost)) == k_exit_node_lost);

  auto host = policy(1, 5, 30);
  host.on(event::JobStop{StopReason::StoreHostLost, k_exit_store_host_lost, false});
  host.on(exit_of(0, ExitStatus::killed(SIGTERM)));
  CHECK(finish_code(cleaned(host)) == k_exit_store_host_lost);

  auto remote = policy(1, 1, 30);
  remote.on(event::JobStop{StopReason::Remote, 3, true});
  remote.on(exit_of(0, ExitStatus::killed(SIGTERM)));
  auto a = cleaned(remote);
  REQUIRE(has<action::StartAttempt>(a));
  const auto& start = std::get<action::StartAttempt>(a.front());
  CHECK(start.failed_local_rank == -1);
  CHECK(start.failed_status == ExitStatus::exited(3));
  CHECK(remote.ending().job_code == std::nullopt);  // the next attempt waits for its own notice
  remote.on(event::AttemptStarted{});
  remote.on(event::JobStop{StopReason::Remote, 3, true});
  remote.on(exit_of(0, ExitStatus::killed(SIGTERM)));
  CHECK(finish_code(cleaned(remote)) == 3);  // restarts used up
}

TEST_CASE("a signal that reached the workers already (Slurm's) starts the grace without a second one") {
  auto p = policy(2, 0, 30);
  auto a = p.on(event::SignalReceived{SIGTERM, true});
  CHECK_FALSE(has<action::SignalWorkers>(a));
  CHECK(has<action::StartGraceTimer>(a));
  CHECK(has<action::KillWorkers>(p.on(event::GraceExpired{})));
  p.on(exit_of(0, ExitStatus::killed(SIGKILL)));
  p.on(exit_of(1, ExitStatus::killed(SIGKILL)));
  CHECK(finish_code(cleaned(p)) == 128 + SIGTERM);
}

TEST_CASE("elastic: a membership change restarts every worker without using up --max-restarts; a signal ends it") {
  auto p = policy(2, 0, 30);
  auto a = p.on(event::JobStop{StopReason::Membership, k_exit_node_lost, false, true});
  CHECK(has<action::SignalWorkers>(a));
  p.on(exit_of(0, ExitStatus::killed(SIGTERM)));
  CHECK(has<action::CleanUp>(p.on(exit_of(1, ExitStatus::killed(SIGTERM)))));
  const auto next = cleaned(p);
  REQUIRE(next.size() == 1);
  const auto* start = std::get_if<action::StartAttempt>(&next[0]);
  REQUIRE(start != nullptr);
  CHECK(start->membership);
  CHECK(start->attempt == 1);
  CHECK(start->restart_count == 0);  // TORCHELASTIC_RESTART_COUNT counts failures only, as torch's
  CHECK(p.restart_count() == 0);
  CHECK(p.attempt() == 1);
  CHECK(p.phase() == Phase::Waiting);

  // Ctrl-C during the membership stop: no new round.
  auto q = policy(1, 5, 30);
  q.on(event::JobStop{StopReason::Membership, k_exit_node_lost, false, true});
  q.on(event::SignalReceived{SIGINT});
  q.on(exit_of(0, ExitStatus::killed(SIGKILL)));
  CHECK(finish_code(cleaned(q)) == 128 + SIGINT);
}

namespace {
JobPolicy slurm_policy(int workers) {
  JobLimits l;
  l.term_timeout = 30;
  l.term_signal = SIGTERM;
  l.slurm_step = true;
  JobPolicy p(workers, l);
  p.on(event::AttemptStarted{});
  return p;
}
}  // namespace

TEST_CASE("Slurm: a worker SIGTERM ended while the job ran is the step's stop, not a failure") {
  auto p = slurm_policy(2);
  auto a = p.on(exit_of(1, ExitStatus::killed(SIGTERM)));
  REQUIRE(has<action::StepStopping>(a));
  CHECK(std::get<action::StepStopping>(a.front()).local_rank == 1);
  CHECK_FALSE(has<action::SignalWorkers>(a));  // Slurm signalled every process of the step
  CHECK(has<action::StartGraceTimer>(a));
  CHECK(p.reason() == StopReason::Signal);
  CHECK(p.root_cause() == std::nullopt);
  CHECK(p.workers()[1].stopped_by_rankrun);
  CHECK(has<action::CleanUp>(p.on(exit_of(0, ExitStatus::killed(SIGTERM)))));
  CHECK(finish_code(cleaned(p)) == 128 + SIGTERM);

  // Outside Slurm the same exit is a failure of that rank.
  auto q = policy(2, 0, 30);
  a = q.on(exit_of(1, ExitStatus::killed(SIGTERM)));
  CHECK_FALSE(has<action::StepStopping>(a));
  CHECK(q.reason() == StopReason::Failure);
  CHECK(q.root_cause() == 1);
}

TEST_CASE("Slurm: a repeated stop signal does not cut the grace short; outside Slurm it kills at once") {
  auto p = slurm_policy(1);
  CHECK_FALSE(p.ignores_stop_signal());
  p.on(event::SignalReceived{SIGTERM, true});
  CHECK(p.ignores_stop_signal());
  CHECK(p.on(event::SignalReceived{SIGTERM, false}).empty());
  CHECK(p.phase() == Phase::Stopping);

  auto q = policy(1, 0, 30);
  q.on(event::SignalReceived{SIGTERM, false});
  CHECK_FALSE(q.ignores_stop_signal());
  CHECK(has<action::KillWorkers>(q.on(event::SignalReceived{SIGTERM, false})));
}

TEST_CASE("preemption: the signal that stops the job after the --preempt-signal exits 120; a failure keeps its code") {
  auto p = policy(1, 0, 30);
  CHECK(p.on(event::PreemptionAnnounced{}).empty());
  CHECK(p.preempted());
  p.on(event::SignalReceived{SIGTERM, false});
  p.on(exit_of(0, ExitStatus::killed(SIGTERM)));
  CHECK(finish_code(cleaned(p)) == k_exit_preempted);

  auto f = policy(1, 0, 30);
  f.on(event::PreemptionAnnounced{});
  f.on(exit_of(0, ExitStatus::exited(4)));
  CHECK(finish_code(cleaned(f)) == 4);

  auto u = policy(1, 0, 30);  // an unkillable process outranks the preemption
  u.on(event::PreemptionAnnounced{});
  u.on(event::SignalReceived{SIGTERM, false});
  u.on(exit_of(0, ExitStatus::killed(SIGTERM)));
  CHECK(finish_code(cleaned(u, true)) == k_exit_unkillable);
}

TEST_CASE("exit_code: one function for every ending") {
  CHECK(exit_code(JobEnding{}) == 0);
  CHECK(exit_code(JobEnding::failed(ExitStatus::exited(3))) == 3);
  CHECK(exit_code(JobEnding::failed(ExitStatus::killed(SIGSEGV))) == 128 + SIGSEGV);
  CHECK(exit_code(JobEnding::stopped_by(SIGINT)) == 128 + SIGINT);
  auto preempted = JobEnding::stopped_by(SIGTERM);
  preempted.preempted = true;
  CHECK(exit_code(preempted) == k_exit_preempted);
  preempted.unkillable = true;
  CHECK(exit_code(preempted) == k_exit_unkillable);
  CHECK(exit_code(JobEnding::of(StopReason::Hang)) == k_exit_hung);
  CHECK(exit_code(JobEnding::of(StopReason::NodeLost)) == k_exit_node_lost);
  CHECK(exit_code(JobEnding::of(StopReason::StoreHostLost)) == k_exit_store_host_lost);
  CHECK(exit_code(JobEnding::of(StopReason::Internal)) == k_exit_internal);
  // Multi-node: the notice's code is every node's, even where this node's own stop differs...
  auto remote = JobEnding::stopped_by(SIGTERM);
  remote.job_code = 3;
  CHECK(exit_code(remote) == 3);
  // ...except a membership change that a signal cut short: the signal's.
  auto round = JobEnding::of(StopReason::Membership);
  round.signal = SIGINT;
  round.job_code = k_exit_node_lost;
  round.membership = true;
  CHECK(exit_code(round) == 128 + SIGINT);
}

TEST_CASE("waiting for an attempt (the barrier): a notice or a signal decides at once, nothing is signalled") {
  // Rank 0 failed; the restart waits at the barrier for every node.
  const auto waiting = [] {
    auto p = policy(2, 1, 30);
    p.on(exit_of(0, ExitStatus::exited(1)));
    p.on(exit_of(1, ExitStatus::killed(SIGTERM)));
    REQUIRE(has<action::StartAttempt>(cleaned(p)));
    REQUIRE(p.phase() == Phase::Waiting);
    return p;
  };
  // A node lost at the barrier of an elastic job: the next round at once, no restart spent.
  auto m = waiting();
  auto a = m.on(event::JobStop{StopReason::Membership, k_exit_node_lost, false, true});
  CHECK_FALSE(has<action::SignalWorkers>(a));
  CHECK_FALSE(has<action::CleanUp>(a));
  REQUIRE(has<action::StartAttempt>(a));
  CHECK(std::get<action::StartAttempt>(a.front()).membership);
  CHECK(m.restart_count() == 1);
  CHECK(m.phase() == Phase::Waiting);
  // A static job's node lost there: the job ends with 122, not with an unkillable worker.
  auto l = waiting();
  a = l.on(event::JobStop{StopReason::NodeLost, k_exit_node_lost, false});
  CHECK_FALSE(has<action::SignalWorkers>(a));
  CHECK(finish_code(a) == k_exit_node_lost);
  CHECK_FALSE(l.gave_up());
  // A signal there ends the job as a signal does.
  auto s = waiting();
  a = s.on(event::SignalReceived{SIGTERM});
  CHECK_FALSE(has<action::SignalWorkers>(a));
  CHECK(finish_code(a) == 128 + SIGTERM);
  // A late exit of the attempt before changes nothing.
  auto e = waiting();
  CHECK(e.on(exit_of(0, ExitStatus::exited(7))).empty());
  // Before the very first attempt started: the store host lost.
  JobPolicy fresh(2, JobLimits{});
  CHECK(fresh.phase() == Phase::Waiting);
  CHECK(finish_code(fresh.on(event::JobStop{StopReason::StoreHostLost, k_exit_store_host_lost, false})) ==
        k_exit_store_host_lost);
}

TEST_CASE("rankrun's own failure while an attempt starts: the started workers get their grace, no restart, 118") {
  auto p = policy(8, 2, 30);
  // local ranks 0-3 were started when the fifth could not be
  const auto stop = p.on(event::InternalFailure{4});
  REQUIRE(has<action::SignalWorkers>(stop));
  CHECK(has<action::StartGraceTimer>(stop));
  CHECK(p.reason() == StopReason::Internal);
  for (std::size_t i = 0; i < 8; ++i) CHECK(p.workers()[i].alive == (i < 4));
  CHECK_FALSE(p.may_restart());
  for (int i = 0; i < 3; ++i) CHECK(p.on(exit_of(i, ExitStatus::killed(SIGTERM))).empty());
  CHECK(has<action::CleanUp>(p.on(exit_of(3, ExitStatus::killed(SIGTERM)))));
  const auto end = cleaned(p);
  CHECK_FALSE(has<action::StartAttempt>(end));
  CHECK(finish_code(end) == k_exit_internal);
}

TEST_CASE(
    "rankrun's own failure before any worker ends at once; while stopping it keeps the cause and forbids the restart") {
  JobLimits l;
  l.max_restarts = 3;
  JobPolicy waiting(2, l);
  CHECK(finish_code(waiting.on(event::InternalFailure{})) == k_exit_internal);

  auto p = policy(2, 3, 30);
  CHECK(has<action::SignalWorkers>(p.on(exit_of(1, ExitStatus::exited(3)))));  // a rank failed: restarts are left
  CHECK(p.may_restart());
  CHECK(p.on(event::InternalFailure{}).empty());  // then a log file could not be made
  CHECK(p.reason() == StopReason::Failure);       // the rank's failure stays the root cause
  CHECK_FALSE(p.may_restart());
  CHECK(has<action::CleanUp>(p.on(exit_of(0, ExitStatus::killed(SIGTERM)))));
  const auto end = cleaned(p);
  CHECK_FALSE(has<action::StartAttempt>(end));
  CHECK(finish_code(end) == 3);
}

TEST_CASE("policy: exits that waited for rankrun with the root cause's are not rankrun's doing") {
  auto p = policy(3, 0, 30);
  p.on(exit_of(2, ExitStatus::exited(3)));  // the first to end: the root cause, the stop begins
  p.on(event::WorkerExited{0, ExitStatus::exited(1), true});
  p.on(exit_of(1, ExitStatus::exited(1)));  // after the stop signal
  CHECK(p.root_cause() == 2);
  CHECK_FALSE(p.workers()[0].stopped_by_rankrun);
  CHECK(p.workers()[1].stopped_by_rankrun);
}
