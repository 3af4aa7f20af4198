#include "launcher/supervisor_policy.hpp"

#include <signal.h>

namespace rankrun::launcher {

SupervisorPolicy::SupervisorPolicy(int workers, int max_restarts, double term_timeout)
    : m_workers(static_cast<std::size_t>(workers)), m_max_restarts(max_restarts), m_term_timeout(term_timeout) {}

std::vector<Action> SupervisorPolicy::on(const Event& event) {
  if (m_phase == Phase::Done) return {};
  if (m_phase == Phase::Restarting) {
    // Between attempts only a signal matters: it ends the job instead of restarting it.
    if (const auto* sig = std::get_if<event::SignalReceived>(&event)) {
      m_signal = sig->signo;
      m_reason = StopReason::Signal;
      m_phase = Phase::Done;
      return {action::Finish{128 + sig->signo}};
    }
    return {};
  }
  return std::visit(
      [this](const auto& e) -> std::vector<Action> {
        using T = std::decay_t<decltype(e)>;
        if constexpr (std::is_same_v<T, event::WorkerExited>) return on_exit(e);
        if constexpr (std::is_same_v<T, event::SignalReceived>) return on_signal(e);
        if constexpr (std::is_same_v<T, event::GraceExpired>) return on_grace_expired();
        if constexpr (std::is_same_v<T, event::HangDetected>) return on_hang();
      },
      event);
}

bool SupervisorPolicy::any_alive() const {
  for (const auto& w : m_workers) {
    if (w.alive) return true;
  }
  return false;
}

std::vector<Action> SupervisorPolicy::on_exit(const event::WorkerExited& e) {
  if (e.local_rank < 0 || static_cast<std::size_t>(e.local_rank) >= m_workers.size()) return {};
  auto& w = m_workers[static_cast<std::size_t>(e.local_rank)];
  if (!w.alive) return {};
  w.alive = false;
  w.status = e.status;
  w.stopped_by_rankrun = m_signalled;

  std::vector<Action> actions;
  if (m_phase == Phase::Running && !e.status.success()) {
    m_reason = StopReason::Failure;
    m_root = e.local_rank;
    if (any_alive()) actions = begin_stop(SIGTERM);
  }
  if (!any_alive()) {
    auto end = end_of_attempt();
    actions.insert(actions.end(), end.begin(), end.end());
  }
  return actions;
}

std::vector<Action> SupervisorPolicy::on_signal(const event::SignalReceived& e) {
  if (m_phase == Phase::Running) {
    m_reason = StopReason::Signal;
    m_signal = e.signo;
    if (!any_alive()) return end_of_attempt();
    // The same signal goes on, as torchrun does: Python turns SIGINT into KeyboardInterrupt.
    return begin_stop(e.signo);
  }
  // A second signal while stopping (the second Ctrl-C) kills at once, and no restart follows.
  if (!m_signal) m_signal = e.signo;
  if (m_phase == Phase::Stopping) {
    m_phase = Phase::Killing;
    return {action::KillWorkers{}};
  }
  return {};
}

std::vector<Action> SupervisorPolicy::on_grace_expired() {
  if (m_phase != Phase::Stopping) return {};
  m_phase = Phase::Killing;
  return {action::KillWorkers{}};
}

std::vector<Action> SupervisorPolicy::on_hang() {
  if (m_phase != Phase::Running) return {};
  m_reason = StopReason::Hang;
  if (!any_alive()) return end_of_attempt();
  return begin_stop(SIGTERM);
}

void SupervisorPolicy::start_next_attempt() {
  if (m_phase != Phase::Restarting) return;
  ++m_restart_count;
  for (auto& w : m_workers) w = WorkerOutcome{};
  m_phase = Phase::Running;
  m_reason = StopReason::None;
  m_root.reset();
  m_signalled = false;
}

std::vector<Action> SupervisorPolicy::begin_stop(int signo) {
  m_phase = Phase::Stopping;
  m_signalled = true;
  return {action::SignalWorkers{signo}, action::StartGraceTimer{m_term_timeout}};
}

std::vector<Action> SupervisorPolicy::end_of_attempt() {
  switch (m_reason) {
    case StopReason::None:
      m_phase = Phase::Done;
      return {action::Finish{0}};
    case StopReason::Failure:
      if (!m_signal && m_restart_count < m_max_restarts) {
        // The outcomes stay readable for the report until start_next_attempt().
        m_phase = Phase::Restarting;
        return {action::RestartWorkers{m_restart_count + 1}};
      }
      m_phase = Phase::Done;
      return {action::Finish{m_workers[static_cast<std::size_t>(*m_root)].status->shell_code()}};
    case StopReason::Signal:
      m_phase = Phase::Done;
      return {action::Finish{128 + *m_signal}};
    case StopReason::Hang:
      m_phase = Phase::Done;
      return {action::Finish{kExitHung}};
  }
  return {};
}

}  // namespace rankrun::launcher
