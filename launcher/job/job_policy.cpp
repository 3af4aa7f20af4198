#include "launcher/job/job_policy.hpp"

namespace rankrun::launcher {

JobPolicy::JobPolicy(int workers, JobLimits limits) : m_workers(static_cast<std::size_t>(workers)), m_limits(limits) {
  for (auto& w : m_workers) w.alive = false;  // none started yet
}

std::vector<Action> JobPolicy::on(const Event& event) {
  if (m_phase == Phase::Done) return {};
  return std::visit(
      [this](const auto& e) -> std::vector<Action> {
        using T = std::decay_t<decltype(e)>;
        if constexpr (std::is_same_v<T, event::WorkerExited>) return on_exit(e);
        if constexpr (std::is_same_v<T, event::SignalReceived>) return on_signal(e);
        if constexpr (std::is_same_v<T, event::GraceExpired>) return on_grace_expired();
        if constexpr (std::is_same_v<T, event::KillDeadlinePassed>) return on_kill_deadline();
        if constexpr (std::is_same_v<T, event::HangDetected>) return on_hang();
        if constexpr (std::is_same_v<T, event::CleanedUp>) return on_cleaned_up(e);
        if constexpr (std::is_same_v<T, event::JobStop>) return on_job_stop(e);
        if constexpr (std::is_same_v<T, event::PreemptionAnnounced>) {
          m_preempted = true;
          return {};
        }
        if constexpr (std::is_same_v<T, event::AttemptStarted>) return on_attempt_started();
        if constexpr (std::is_same_v<T, event::InternalFailure>) return on_internal(e);
      },
      event);
}

bool JobPolicy::any_alive() const {
  for (const auto& w : m_workers) {
    if (w.alive) return true;
  }
  return false;
}

std::vector<Action> JobPolicy::on_attempt_started() {
  if (m_phase != Phase::Waiting) return {};
  m_phase = Phase::Running;
  for (auto& w : m_workers) w = WorkerOutcome{};
  return {};
}

std::vector<Action> JobPolicy::decide_now() {
  m_phase = Phase::CleaningUp;
  return on_cleaned_up(event::CleanedUp{false});
}

std::vector<Action> JobPolicy::on_exit(const event::WorkerExited& e) {
  if (m_phase == Phase::CleaningUp || m_phase == Phase::Waiting) return {};
  if (e.local_rank < 0 || static_cast<std::size_t>(e.local_rank) >= m_workers.size()) return {};
  auto& w = m_workers[static_cast<std::size_t>(e.local_rank)];
  if (!w.alive) return {};
  std::vector<Action> actions;
  if (m_limits.slurm_step && m_phase == Phase::Running && e.status == ExitStatus::killed(m_limits.term_signal)) {
    // Slurm is stopping the step: its SIGTERM reached this worker before rankrun's own. That is
    // the step's stop (a preemption, a scancel), not a failure of this rank.
    actions.push_back(action::StepStopping{e.local_rank});
    const auto stop = on_signal(event::SignalReceived{m_limits.term_signal, true});
    actions.insert(actions.end(), stop.begin(), stop.end());
  }
  w.alive = false;
  w.status = e.status;
  w.stopped_by_rankrun = m_signalled && !e.before_signal;

  if (m_phase == Phase::Running && !e.status.success()) {
    m_reason = StopReason::Failure;
    m_root = e.local_rank;
    if (any_alive()) actions = begin_stop(m_limits.term_signal);
  }
  if (!any_alive()) {
    auto end = begin_cleanup();
    actions.insert(actions.end(), end.begin(), end.end());
  }
  return actions;
}

std::vector<Action> JobPolicy::on_signal(const event::SignalReceived& e) {
  if (ignores_stop_signal()) return {};
  switch (m_phase) {
    case Phase::Waiting:
      m_reason = StopReason::Signal;
      m_signal = e.signo;
      return decide_now();
    case Phase::Running:
      m_reason = StopReason::Signal;
      m_signal = e.signo;
      if (!any_alive()) return begin_cleanup();
      // The same signal goes on, as torchrun does: Python turns SIGINT into KeyboardInterrupt.
      return begin_stop(e.signo, e.workers_signalled);
    case Phase::Stopping:
      // A second signal while stopping (the second Ctrl-C) kills at once, and no restart follows.
      if (!m_signal) m_signal = e.signo;
      return begin_kill(false);
    case Phase::Killing:
      if (!m_signal) m_signal = e.signo;
      return {};
    case Phase::CleaningUp:
      // Between attempts a signal ends the job instead of restarting it; a job that succeeded
      // stays a success.
      if (m_reason != StopReason::None && !m_signal) {
        m_signal = e.signo;
        m_reason = StopReason::Signal;
      }
      return {};
    case Phase::Done: break;
  }
  return {};
}

std::vector<Action> JobPolicy::on_grace_expired() {
  if (m_phase != Phase::Stopping) return {};
  return begin_kill(true);
}

std::vector<Action> JobPolicy::on_kill_deadline() {
  if (m_phase != Phase::Killing || !any_alive()) return {};
  m_gave_up = true;
  return begin_cleanup();
}

std::vector<Action> JobPolicy::on_hang() {
  if (m_phase != Phase::Running) return {};
  m_reason = StopReason::Hang;
  if (!any_alive()) return begin_cleanup();
  return begin_stop(m_limits.term_signal);
}

std::vector<Action> JobPolicy::on_internal(const event::InternalFailure& e) {
  m_internal = true;
  switch (m_phase) {
    case Phase::Waiting: m_reason = StopReason::Internal; return decide_now();
    case Phase::Running:
      // The workers the attempt did not start are not running (their outcome stays unknown).
      if (e.started >= 0) {
        for (std::size_t i = static_cast<std::size_t>(e.started); i < m_workers.size(); ++i) {
          m_workers[i] = WorkerOutcome{false, std::nullopt, false};
        }
      }
      m_reason = StopReason::Internal;
      m_root.reset();
      if (!any_alive()) return begin_cleanup();
      return begin_stop(m_limits.term_signal);
    case Phase::Stopping:
    case Phase::Killing:
    case Phase::CleaningUp:
      // Already ending: what ends it stays the cause; no restart follows.
      if (m_reason == StopReason::None) m_reason = StopReason::Internal;
      return {};
    case Phase::Done: break;
  }
  return {};
}

std::vector<Action> JobPolicy::on_job_stop(const event::JobStop& e) {
  // The first notice of an attempt is the job's; a later one (this node losing the store host
  // after the notice came) changes nothing.
  if (m_job_code) return {};
  m_job_code = e.exit_code;
  m_job_restartable = e.restartable;
  m_job_membership = e.membership;
  if (m_phase == Phase::Waiting && e.reason != StopReason::None) {
    // Before this node's workers started (another node's stop, a node lost at the barrier).
    m_reason = e.reason;
    return decide_now();
  }
  if (m_phase != Phase::Running || e.reason == StopReason::None) return {};
  m_reason = e.reason;
  if (!any_alive()) return begin_cleanup();
  return begin_stop(m_limits.term_signal);
}

std::vector<Action> JobPolicy::restart(int failed_local_rank, ExitStatus failed, bool membership) {
  if (!membership) ++m_restart_count;
  ++m_attempt;
  for (auto& w : m_workers) w = WorkerOutcome{false, std::nullopt, false};
  m_phase = Phase::Waiting;
  m_reason = StopReason::None;
  m_root.reset();
  m_signalled = false;
  m_stop_signo = 0;
  m_job_code.reset();
  m_job_restartable = false;
  m_job_membership = false;
  return {action::StartAttempt{m_restart_count, failed_local_rank, failed, m_attempt, membership}};
}

std::vector<Action> JobPolicy::on_cleaned_up(const event::CleanedUp& e) {
  if (m_phase != Phase::CleaningUp) return {};
  if (e.unkillable || m_gave_up) {
    m_gave_up = true;
    return finish();
  }
  const bool restarts_left = !m_signal && !m_internal && m_restart_count < m_limits.max_restarts;
  if (m_job_code) {
    // Multi-node: the notice decides, the same way on every node.
    if (m_job_membership) {
      if (m_signal || m_internal) return finish();
      return restart(-1, ExitStatus::exited(*m_job_code), true);
    }
    if (!m_job_restartable || !restarts_left) return finish();
    if (m_root) return restart(*m_root, *m_workers[static_cast<std::size_t>(*m_root)].status);
    return restart(-1, *m_job_code > 128 ? ExitStatus::killed(*m_job_code - 128) : ExitStatus::exited(*m_job_code));
  }
  if (m_reason == StopReason::Failure && restarts_left) {
    return restart(*m_root, *m_workers[static_cast<std::size_t>(*m_root)].status);
  }
  return finish();
}

bool JobPolicy::may_restart() const {
  return (m_reason == StopReason::Failure || m_reason == StopReason::Remote) && !m_signal && !m_internal &&
         m_restart_count < m_limits.max_restarts;
}

JobEnding JobPolicy::ending() const {
  JobEnding e;
  e.reason = m_reason;
  if (m_root) e.root = m_workers[static_cast<std::size_t>(*m_root)].status;
  e.signal = m_signal;
  e.preempted = m_preempted;
  e.unkillable = m_gave_up;
  e.job_code = m_job_code;
  e.membership = m_job_membership;
  return e;
}

std::vector<Action> JobPolicy::begin_stop(int signo, bool already_signalled) {
  m_phase = Phase::Stopping;
  m_signalled = true;
  m_stop_signo = signo;
  if (already_signalled) return {action::StartGraceTimer{m_limits.term_timeout}};
  return {action::SignalWorkers{signo}, action::StartGraceTimer{m_limits.term_timeout}};
}

std::vector<Action> JobPolicy::begin_kill(bool grace_expired) {
  m_phase = Phase::Killing;
  m_signalled = true;
  return {action::KillWorkers{grace_expired, m_stop_signo}, action::StartKillTimer{m_limits.kill_timeout}};
}

std::vector<Action> JobPolicy::begin_cleanup() {
  m_phase = Phase::CleaningUp;
  return {action::CleanUp{}};
}

std::vector<Action> JobPolicy::finish() {
  m_phase = Phase::Done;
  return {action::Finish{exit_code(ending())}};
}

}  // namespace rankrun::launcher
