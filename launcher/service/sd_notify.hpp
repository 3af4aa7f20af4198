#pragma once
// systemd's notify protocol, built in (no libsystemd): one datagram per message to
// $NOTIFY_SOCKET, a filesystem path or, when it starts with '@', an abstract socket. When
// NOTIFY_SOCKET is unset (rankrun is not a Type=notify service) every call does nothing.
// The messages themselves are formatted in service_status.hpp.

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>

#include "base/unique_fd.hpp"

namespace rankrun::launcher {

class SdNotifier {
 public:
  /// From the environment: $NOTIFY_SOCKET, $WATCHDOG_USEC, $WATCHDOG_PID.
  static SdNotifier from_environment();
  /// For tests: an explicit socket address ("" for none) and watchdog interval.
  explicit SdNotifier(std::string socket_address, std::optional<std::chrono::microseconds> watchdog = std::nullopt);
  SdNotifier() = default;

  bool enabled() const { return !m_address.empty(); }
  /// Half of $WATCHDOG_USEC when systemd wants keep-alives from this process.
  std::optional<std::chrono::microseconds> watchdog_interval() const { return m_watchdog; }

  /// Sends one datagram; false (logged once at debug level) when it could not. A no-op,
  /// returning true, when there is no socket.
  bool send(const std::string& message);

 private:
  std::string m_address;
  std::optional<std::chrono::microseconds> m_watchdog;
  UniqueFd m_fd;
  bool m_failed_once = false;
};

}  // namespace rankrun::launcher
