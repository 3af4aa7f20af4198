#pragma once
// The supervisor's decisions as a pure state machine: (state, event) -> actions.
//
//            all exited 0
//   Running ───────────────────────────────────────────────▶ Done (exit 0)
//     │ a worker fails / a signal arrives / a hang is detected
//     ▼
//   Stopping: signal every live worker's process group, start the grace timer
//     │ grace expires, or a second signal arrives
//     ▼
//   Killing: SIGKILL every live worker's process group
//     │
//     └─(all exited)─▶ failure with restarts left (and no signal)? ─yes─▶ Restarting ─▶ Running
//                                                          └─no──▶ Done (exit code, see exit_status.hpp)
//
// The effectful Supervisor turns exits, signals and timers into events and carries out the
// returned actions; it decides nothing itself.

#include <optional>
#include <variant>
#include <vector>

#include "launcher/exit_status.hpp"

namespace rankrun::launcher {

namespace event {
struct WorkerExited { int local_rank; ExitStatus status; };
struct SignalReceived { int signo; };
struct GraceExpired {};
struct HangDetected {};
}  // namespace event
using Event = std::variant<event::WorkerExited, event::SignalReceived, event::GraceExpired, event::HangDetected>;

namespace action {
struct SignalWorkers { int signo; };       // to every live worker's process group
struct StartGraceTimer { double seconds; };
struct KillWorkers {};                      // SIGKILL to every live worker's process group
struct RestartWorkers { int restart_count; };
struct Finish { int exit_code; };
}  // namespace action
using Action = std::variant<action::SignalWorkers, action::StartGraceTimer, action::KillWorkers, action::RestartWorkers,
                            action::Finish>;

enum class Phase { Running, Stopping, Killing, Restarting, Done };

/// Why the current attempt is ending.
enum class StopReason { None, Failure, Signal, Hang };

struct WorkerOutcome {
  bool alive = true;
  std::optional<ExitStatus> status;
  bool stopped_by_rankrun = false;  // it exited after rankrun signalled it
};

class SupervisorPolicy {
 public:
  SupervisorPolicy(int workers, int max_restarts, double term_timeout);

  std::vector<Action> on(const Event& event);
  /// After RestartWorkers: forget the failed attempt and count the restart.
  void start_next_attempt();

  Phase phase() const { return m_phase; }
  StopReason reason() const { return m_reason; }
  /// The first worker that failed on its own in this attempt (the root cause).
  std::optional<int> root_cause() const { return m_root; }
  std::optional<int> stop_signal() const { return m_signal; }
  int restart_count() const { return m_restart_count; }
  const std::vector<WorkerOutcome>& workers() const { return m_workers; }

 private:
  std::vector<Action> on_exit(const event::WorkerExited& e);
  std::vector<Action> on_signal(const event::SignalReceived& e);
  std::vector<Action> on_grace_expired();
  std::vector<Action> on_hang();
  std::vector<Action> begin_stop(int signo);
  std::vector<Action> end_of_attempt();
  bool any_alive() const;

  std::vector<WorkerOutcome> m_workers;
  int m_max_restarts;
  double m_term_timeout;
  Phase m_phase = Phase::Running;
  StopReason m_reason = StopReason::None;
  std::optional<int> m_root;
  std::optional<int> m_signal;
  bool m_signalled = false;  // rankrun has signalled the workers in this attempt
  int m_restart_count = 0;
};

}  // namespace rankrun::launcher
