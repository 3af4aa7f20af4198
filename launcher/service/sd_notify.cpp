#include "launcher/service/sd_notify.hpp"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <spdlog/spdlog.h>

#include "launcher/service/service_status.hpp"

namespace rankrun::launcher {

namespace {

std::optional<std::string> env(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

}  // namespace

SdNotifier SdNotifier::from_environment() {
  const auto socket = env("NOTIFY_SOCKET");
  if (!socket || socket->empty()) return SdNotifier();
  return SdNotifier(*socket, launcher::watchdog_interval(env("WATCHDOG_USEC"), env("WATCHDOG_PID"), ::getpid()));
}

SdNotifier::SdNotifier(std::string socket_address, std::optional<std::chrono::microseconds> watchdog)
    : m_address(std::move(socket_address)), m_watchdog(watchdog) {}

bool SdNotifier::send(const std::string& message) {
  if (m_address.empty()) return true;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const bool abstract = m_address[0] == '@';
  if (m_address.size() >= sizeof(addr.sun_path) || (m_address[0] != '/' && !abstract)) {
    if (!m_failed_once)
      spdlog::warn("NOTIFY_SOCKET={} is not a socket address rankrun can use; not notifying systemd", m_address);
    m_failed_once = true;
    return false;
  }
  std::memcpy(addr.sun_path, m_address.data(), m_address.size());
  if (abstract) addr.sun_path[0] = '\0';
  const auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + m_address.size() + (abstract ? 0 : 1));
  if (!m_fd) m_fd.reset(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  bool ok = false;
  if (m_fd) {
    ssize_t n;
    do {
      n = ::sendto(m_fd.get(), message.data(), message.size(), MSG_NOSIGNAL, reinterpret_cast<const sockaddr*>(&addr),
                   len);
    } while (n < 0 && errno == EINTR);
    ok = n == static_cast<ssize_t>(message.size());
  }
  if (!ok && !m_failed_once) {
    spdlog::warn("cannot notify systemd at {}: {}", m_address, std::strerror(errno));
    m_failed_once = true;
  }
  return ok;
}

}  // namespace rankrun::launcher
