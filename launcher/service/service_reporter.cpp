#include "launcher/service/service_reporter.hpp"

#include <unistd.h>

#include <optional>
#include <utility>

namespace rankrun::launcher {
using Clock = std::chrono::steady_clock;

ServiceReporter::ServiceReporter(boost::asio::io_context& io, EnvMap& env, std::function<ServiceSnapshot()> snapshot)
    : m_watchdog_timer(io), m_snapshot(std::move(snapshot)) {
  const auto value = [&env](const char* name) -> std::optional<std::string> {
    const auto it = env.find(name);
    return it == env.end() ? std::nullopt : std::optional<std::string>(it->second);
  };
  if (const auto socket = value("NOTIFY_SOCKET"); socket && !socket->empty()) {
    m_notify = SdNotifier(*socket, watchdog_interval(value("WATCHDOG_USEC"), value("WATCHDOG_PID"), ::getpid()));
  }
  for (const char* name : {"NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"}) env.erase(name);
}

void ServiceReporter::start() {
  if (m_notify.watchdog_interval()) watchdog_tick();
}

void ServiceReporter::attempt_started() {
  if (m_ready_sent) {
    status();
    return;
  }
  // The rendezvous is done and every worker of the first attempt started.
  m_ready_sent = true;
  m_status_sent = Clock::now();
  m_notify.send(ready_message(format_service_status(m_snapshot())));
}

void ServiceReporter::status() {
  if (!m_notify.enabled() || m_done) return;
  m_status_sent = Clock::now();
  m_notify.send(status_message(format_service_status(m_snapshot())));
}

void ServiceReporter::new_step() {
  // systemctl status need not follow every step.
  if (m_notify.enabled() && Clock::now() - m_status_sent >= std::chrono::seconds(1)) status();
}

void ServiceReporter::after_event(bool stop_began, bool may_restart) {
  if (!m_notify.enabled()) return;
  const auto extend = std::exchange(m_extend_stop_by, 0.0);
  if (stop_began && !m_done) {
    const auto text = format_service_status(m_snapshot());
    if (may_restart || m_stopping_sent) {
      m_notify.send(status_message(text));
    } else {
      // systemd then shows the service as deactivating.
      m_stopping_sent = true;
      m_notify.send(stopping_message(text));
    }
    m_status_sent = Clock::now();
  }
  if (extend > 0) m_notify.send(extend_timeout_message(extend));
}

void ServiceReporter::hang_seen() {
  m_hang_seen = true;
  m_watchdog_timer.cancel();
}

void ServiceReporter::done(int exit_code) {
  if (m_notify.enabled() && !m_done) {
    const std::string text = "done: exit code " + std::to_string(exit_code);
    m_notify.send(m_stopping_sent ? status_message(text) : stopping_message(text));
    m_stopping_sent = true;
  }
  m_done = true;
}

void ServiceReporter::stop() {
  m_done = true;
  m_stopped = true;
  m_watchdog_timer.cancel();
}

void ServiceReporter::watchdog_tick() {
  const auto interval = m_notify.watchdog_interval();
  if (!interval || m_hang_seen || m_stopped) return;
  m_notify.send(k_watchdog_message);
  m_watchdog_timer.expires_after(*interval);
  m_watchdog_timer.async_wait([this](boost::system::error_code ec) {
    if (!ec) watchdog_tick();
  });
}

}  // namespace rankrun::launcher
