#pragma once
// A job's life on one node as a pure state machine: (state, event) -> actions. The Job
// (job.hpp) turns child exits, signals, timers and the cleanup's answer into events and carries
// out the returned actions; it decides nothing itself.
//
//   Waiting: the attempt's workers are not started yet (multi-node: the barrier before it, where
//     │      every node must be ready). A stop signal or a job-wide notice here decides at once,
//     │      as after a cleanup: there is nothing to stop.
//     │ AttemptStarted
//     ▼      every worker exited
//   Running ─────────────────────────────────────────────────────────────┐
//     │ a worker fails / a signal arrives / a hang is detected           │
//     ▼                                                                  │
//   Stopping: the stop signal to every live worker's process group,      │
//     │       grace timer (--term-timeout)                               │
//     │ grace expires, or a second signal arrives                        │
//     ▼                                                                  │
//   Killing: SIGKILL, kill deadline (k_kill_timeout)                       │
//     │ all exited, or the deadline passes (give up: exit 125)           │
//     ▼                                                                  ▼
//   CleaningUp: the attempt's leftovers (daemons, shared memory) are ended
//     │ cleaned up
//     ├─ a failure, restarts left, no signal ──▶ StartAttempt ──▶ Waiting
//     └─ otherwise ──▶ Done (exit code: exit_code(ending()), types/exit_code.hpp)
//
// Under Slurm (JobLimits::slurm_step) Slurm signals every process of the step itself: a worker
// that SIGTERM ended while the job ran is the step's stop (as if rankrun got that signal), not
// a failure, and a repeated stop signal while stopping is ignored (srun and slurmstepd both pass
// it on). After the --preempt-signal (PreemptionAnnounced) the signal that stops the job exits
// k_exit_preempted.
//
// Multi-node: JobStop is the job-wide notice of the attempt (another node's failure, signal or
// hang, a lost node, the store host gone, or the attempt's success everywhere). It stops the
// workers like a local failure, and from then on it decides: the exit code is the notice's on
// every node, and a restart follows only when the notice allows one.

#include <optional>
#include <variant>
#include <vector>

#include "launcher/types/exit_code.hpp"
#include "launcher/types/exit_status.hpp"
#include "launcher/types/stop.hpp"

namespace rankrun::launcher {

namespace event {
struct WorkerExited {
  int local_rank;
  ExitStatus status;
  /// It ended before rankrun's stop signal could reach it (exits rankrun saw together): not
  /// stopped by rankrun, even if it is reported after the stop began.
  bool before_signal = false;
};
/// `workers_signalled`: the sender signalled the workers too (Slurm signals every process of a
/// step): they get no second one from rankrun, only the grace and then SIGKILL.
struct SignalReceived {
  int signo;
  bool workers_signalled = false;
};
struct GraceExpired {};
struct KillDeadlinePassed {};
struct HangDetected {};
struct CleanedUp {
  bool unkillable;
};  // some process of the job survived SIGKILL
/// The --preempt-signal came (Slurm announces a preemption): the stop that follows is one.
struct PreemptionAnnounced {};
/// The attempt's workers were started (Waiting -> Running).
struct AttemptStarted {};
/// rankrun itself cannot go on (a log directory or file it cannot create, an error of its own):
/// the live workers are stopped with their grace, no restart follows, and the job ends with
/// k_exit_internal. `started`: how many of the attempt's workers (local ranks 0..started-1) were
/// started when it happened (-1: all that were to be).
struct InternalFailure {
  int started = -1;
};
/// Multi-node: how the attempt ends for the whole job. `reason` is what this node reports
/// (None: the attempt succeeded on every node); `exit_code` is every node's. `membership`: an
/// elastic job's nodes changed: a new attempt follows (unless a signal came), and it does not
/// use up --max-restarts.
struct JobStop {
  StopReason reason;
  int exit_code;
  bool restartable;
  bool membership = false;
};
}  // namespace event
using Event = std::variant<event::WorkerExited, event::SignalReceived, event::GraceExpired, event::KillDeadlinePassed,
                           event::HangDetected, event::CleanedUp, event::JobStop, event::PreemptionAnnounced,
                           event::AttemptStarted, event::InternalFailure>;

namespace action {
struct SignalWorkers {
  int signo;
};  // to every live worker's process group
struct StartGraceTimer {
  double seconds;
};
/// SIGKILL to every live worker's process group. `stop_signal`: the signal the workers were
/// stopped with before it (SIGTERM, or the one rankrun received and forwarded: SIGINT after a
/// Ctrl-C); 0 when they got none.
struct KillWorkers {
  bool grace_expired;
  int stop_signal = 0;
};
struct StartKillTimer {
  double seconds;
};
struct CleanUp {};  // end the attempt's leftovers, then answer with CleanedUp
/// The failed attempt is over; start the next one. `failed` is the root cause of the last
/// (failed_local_rank -1: it failed on another node). `attempt` counts every attempt, the
/// restarts after a membership change included (`membership`); `restart_count` only those
/// that used up --max-restarts (TORCHELASTIC_RESTART_COUNT, as torch counts).
struct StartAttempt {
  int restart_count;
  int failed_local_rank;
  ExitStatus failed_status;
  int attempt = 0;
  bool membership = false;
};
struct Finish {
  int exit_code;
};
/// Under Slurm: a SIGTERM from outside rankrun ended this worker while the job ran; the step is
/// being stopped (the workers have the signal already), which the shell reports.
struct StepStopping {
  int local_rank;
};
}  // namespace action
using Action = std::variant<action::SignalWorkers, action::StartGraceTimer, action::KillWorkers, action::StartKillTimer,
                            action::CleanUp, action::StartAttempt, action::Finish, action::StepStopping>;

enum class Phase { Waiting, Running, Stopping, Killing, CleaningUp, Done };

struct WorkerOutcome {
  bool alive = true;
  std::optional<ExitStatus> status;
  bool stopped_by_rankrun = false;  // it exited after rankrun signalled it
};

struct JobLimits {
  int max_restarts = 0;
  double term_timeout = 30.0;            // --term-timeout: the grace between the stop signal and SIGKILL
  double kill_timeout = k_kill_timeout;  // after SIGKILL, before giving up
  int term_signal = 15;                  // SIGTERM on Linux; given by the shell
  bool slurm_step = false;               // rankrun runs inside a Slurm step (see the diagram's notes)
};

class JobPolicy {
 public:
  JobPolicy(int workers, JobLimits limits);

  std::vector<Action> on(const Event& event);

  Phase phase() const { return m_phase; }
  StopReason reason() const { return m_reason; }
  /// The first worker that failed on its own in this attempt (the root cause).
  std::optional<int> root_cause() const { return m_root; }
  std::optional<int> stop_signal() const { return m_signal; }
  /// The --preempt-signal came.
  bool preempted() const { return m_preempted; }
  /// A stop signal now would repeat the one the job is already stopping for (under Slurm): it
  /// is ignored.
  bool ignores_stop_signal() const { return m_limits.slurm_step && m_phase != Phase::Running; }
  /// The stop under way may still be followed by a restart (a failure, restarts left, no signal).
  bool may_restart() const;
  /// How the job ends as things stand; its exit code is exit_code(ending()).
  JobEnding ending() const;
  int restart_count() const { return m_restart_count; }
  /// The attempt now running: 0, then one more on every restart (membership changes included).
  int attempt() const { return m_attempt; }
  /// A worker outlived SIGKILL past the kill deadline.
  bool gave_up() const { return m_gave_up; }
  const std::vector<WorkerOutcome>& workers() const { return m_workers; }
  const JobLimits& limits() const { return m_limits; }

 private:
  std::vector<Action> on_exit(const event::WorkerExited& e);
  std::vector<Action> on_signal(const event::SignalReceived& e);
  std::vector<Action> on_grace_expired();
  std::vector<Action> on_kill_deadline();
  std::vector<Action> on_hang();
  std::vector<Action> on_internal(const event::InternalFailure& e);
  std::vector<Action> on_cleaned_up(const event::CleanedUp& e);
  std::vector<Action> on_job_stop(const event::JobStop& e);
  std::vector<Action> on_attempt_started();
  /// Waiting: nothing runs, so the stop is over at once; what follows is the cleanup's decision.
  std::vector<Action> decide_now();
  std::vector<Action> restart(int failed_local_rank, ExitStatus failed, bool membership = false);
  std::vector<Action> begin_stop(int signo, bool already_signalled = false);
  std::vector<Action> begin_kill(bool grace_expired);
  std::vector<Action> begin_cleanup();
  std::vector<Action> finish();
  bool any_alive() const;

  std::vector<WorkerOutcome> m_workers;
  JobLimits m_limits;
  Phase m_phase = Phase::Waiting;
  StopReason m_reason = StopReason::None;
  std::optional<int> m_root;
  std::optional<int> m_signal;
  bool m_signalled = false;  // rankrun has signalled the workers in this attempt
  int m_stop_signo = 0;      // the signal that began this attempt's stop (0: none yet)
  bool m_gave_up = false;
  bool m_internal = false;  // rankrun's own failure: no restart after it
  bool m_preempted = false;
  int m_restart_count = 0;
  int m_attempt = 0;
  bool m_job_membership = false;  // the notice is a membership change
  std::optional<int> m_job_code;  // the job-wide notice's exit code (multi-node)
  bool m_job_restartable = false;
};

}  // namespace rankrun::launcher
