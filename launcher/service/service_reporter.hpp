#pragma once
// What a job tells systemd when rankrun runs as a Type=notify service: READY=1 once the first
// attempt's workers started, STATUS= as the job goes (at most one a second for new steps),
// STOPPING=1 when a stop began that no restart can follow, EXTEND_TIMEOUT_USEC= to cover the
// grace, and WATCHDOG=1 every half $WATCHDOG_USEC while supervision is healthy (never after a
// hang was detected, so that systemd's watchdog ends a rankrun that cannot end a hang itself).
// Outside systemd (no $NOTIFY_SOCKET) every call does nothing.

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <functional>

#include "launcher/types/env_map.hpp"
#include "launcher/service/sd_notify.hpp"
#include "launcher/service/service_status.hpp"

namespace rankrun::launcher {

class ServiceReporter {
 public:
  /// Takes $NOTIFY_SOCKET, $WATCHDOG_USEC and $WATCHDOG_PID out of `env`: the socket is
  /// rankrun's alone, not the workers'. `snapshot` says where the job stands.
  ServiceReporter(boost::asio::io_context& io, EnvMap& env, std::function<ServiceSnapshot()> snapshot);

  bool enabled() const { return m_notify.enabled(); }
  /// Starts the watchdog's keep-alives, if systemd asked for them.
  void start();
  /// An attempt's workers started: READY=1 the first time, then STATUS=.
  void attempt_started();
  /// STATUS= now.
  void status();
  /// A runtime heartbeat reported a new highest step while the job runs: STATUS= at most once a
  /// second.
  void new_step();
  /// After an event: a stop that began is told (STOPPING=1 unless `may_restart`), then the
  /// EXTEND_TIMEOUT_USEC= asked for during the event.
  void after_event(bool stop_began, bool may_restart);
  /// The stop about to begin may take this long (grace, SIGKILL's deadline, the cleanup).
  void extend_stop_by(double seconds) { m_extend_stop_by = seconds; }
  /// A hang was detected: no more WATCHDOG=1.
  void hang_seen();
  /// The job ended with `exit_code`: no STATUS= after this (the watchdog goes on until stop():
  /// node 0 may still serve the other nodes' reports).
  void done(int exit_code);
  /// Ends the watchdog's keep-alives.
  void stop();

 private:
  void watchdog_tick();

  SdNotifier m_notify;
  boost::asio::steady_timer m_watchdog_timer;
  std::function<ServiceSnapshot()> m_snapshot;
  bool m_ready_sent = false;
  bool m_stopping_sent = false;
  bool m_hang_seen = false;
  bool m_done = false;
  bool m_stopped = false;
  double m_extend_stop_by = 0;  // EXTEND_TIMEOUT_USEC= to send after this event's actions
  std::chrono::steady_clock::time_point m_status_sent{};
};

}  // namespace rankrun::launcher
