#include "rendezvous/tcp_connection.hpp"
#include "base/host_port.hpp"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <optional>
#include <cerrno>
#include <cstring>
#include <memory>

namespace rankrun::rendezvous::tcp {

using std::chrono::milliseconds;

std::string errno_text(int err) { return std::strerror(err); }

int remaining_ms(Clock::time_point deadline) {
  const auto left = std::chrono::ceil<milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<long long>(left, 0, 1 << 30));
}

Clock::time_point deadline_after(milliseconds timeout) {
  const auto now = Clock::now();
  if (timeout > std::chrono::duration_cast<milliseconds>(Clock::time_point::max() - now))
    return Clock::time_point::max();
  return now + timeout;
}

std::string endpoint_name(const std::string& host, std::uint16_t port) { return host_port(host, port); }

Wait wait_for(int fd, short events, int wake_fd, Clock::time_point deadline) {
  for (;;) {
    pollfd p[2] = {{fd, events, 0}, {wake_fd, POLLIN, 0}};
    const int r = ::poll(p, wake_fd >= 0 ? 2 : 1, remaining_ms(deadline));
    if (r > 0 && wake_fd >= 0 && p[1].revents != 0) return Wait::Woken;
    if (r > 0 && p[0].revents != 0) return Wait::Ready;
    if (r < 0 && errno != EINTR) return Wait::Failed;
    if (r >= 0 && Clock::now() >= deadline) return Wait::TimedOut;
  }
}

void set_liveness(int fd, milliseconds user_timeout) {
  const auto ms = static_cast<unsigned>(std::clamp<long long>(user_timeout.count(), 1, 1LL << 30));
  const int one = 1;
  const int probe_s = static_cast<int>(std::max<unsigned>(1, ms / 3000));
  const int count = 3;
  ::setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ms, sizeof(ms));
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &probe_s, sizeof(probe_s));
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &probe_s, sizeof(probe_s));
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof(count));
}

Connected connect_once(const std::string& host, std::uint16_t port, Clock::time_point deadline,
                       const ConnectOptions& options) {
  Connected out;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* results = nullptr;
  const std::string service = std::to_string(port);
  if (int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &results); rc != 0) {
    out.error = std::string("cannot resolve host: ") + ::gai_strerror(rc);
    return out;
  }
  const std::unique_ptr<addrinfo, void (*)(addrinfo*)> owner(results, ::freeaddrinfo);
  out.error = "no address";
  for (addrinfo* ai = results; ai != nullptr; ai = ai->ai_next) {
    const int s = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
    if (s < 0) {
      out.error = errno_text(errno);
      continue;
    }
    if (options.adopt) options.adopt(s);
    int err = 0;
    if (::connect(s, ai->ai_addr, ai->ai_addrlen) != 0) {
      err = errno;
      if (err == EINPROGRESS) {
        switch (wait_for(s, POLLOUT, options.wake_fd, deadline)) {
          case Wait::Ready: {
            socklen_t len = sizeof(err);
            if (::getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
            break;
          }
          case Wait::TimedOut: err = ETIMEDOUT; break;
          case Wait::Failed: err = errno; break;
          case Wait::Woken: out.woken = true; break;
        }
      }
    }
    if (err != 0 || out.woken) {
      out.error = out.woken ? "interrupted" : errno_text(err);
      if (options.adopt) options.adopt(-1);
      ::close(s);
      if (out.woken) return out;
      continue;
    }
    const int one = 1;
    ::setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (options.user_timeout.count() > 0) set_liveness(s, options.user_timeout);
    out.fd = s;
    out.error.clear();
    return out;
  }
  return out;
}

milliseconds Backoff::next(milliseconds cap) {
  constexpr milliseconds k_max{1000};
  constexpr double k_factor = 1.5;
  std::uniform_real_distribution<double> jitter(0.5, 1.5);
  const auto pause =
      std::min(milliseconds(static_cast<long long>(static_cast<double>(m_step.count()) * jitter(m_rng))), cap);
  m_step = std::min(k_max, milliseconds(static_cast<long long>(static_cast<double>(m_step.count()) * k_factor)));
  return pause;
}

namespace {

// After EAGAIN: nothing once `fd` is ready again, else why the I/O ends.
std::optional<Io> wait_to_go_on(int fd, short events, int wake_fd, Clock::time_point deadline) {
  switch (wait_for(fd, events, wake_fd, deadline)) {
    case Wait::Ready: return std::nullopt;
    case Wait::TimedOut: return Io::TimedOut;
    case Wait::Woken: return Io::Woken;
    case Wait::Failed: break;
  }
  return Io::Failed;
}

}  // namespace

Io send_all(int fd, std::string_view bytes, int wake_fd, Clock::time_point deadline) {
  std::size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (const auto stop = wait_to_go_on(fd, POLLOUT, wake_fd, deadline)) return *stop;
      continue;
    }
    return Io::Failed;
  }
  return Io::Done;
}

bool peer_has_everything(int fd) {
  tcp_info info{};
  socklen_t len = sizeof(info);
  if (::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0) return false;
  return info.tcpi_state == TCP_ESTABLISHED && info.tcpi_unacked == 0;
}

Io receive_exact(int fd, char* dest, std::size_t size, int wake_fd, Clock::time_point deadline) {
  std::size_t got = 0;
  while (got < size) {
    const ssize_t n = ::recv(fd, dest + got, size - got, 0);
    if (n > 0) {
      got += static_cast<std::size_t>(n);
      continue;
    }
    if (n == 0) return Io::Closed;
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return Io::Failed;
    if (const auto stop = wait_to_go_on(fd, POLLIN, wake_fd, deadline)) return *stop;
  }
  return Io::Done;
}

Io receive_some(int fd, std::string& out, std::size_t max, int wake_fd, Clock::time_point deadline) {
  for (;;) {
    const std::size_t old = out.size();
    out.resize(old + max);
    const ssize_t n = ::recv(fd, out.data() + old, max, 0);
    out.resize(old + static_cast<std::size_t>(std::max<ssize_t>(n, 0)));
    if (n > 0) return Io::Done;
    if (n == 0) return Io::Closed;
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return Io::Failed;
    if (const auto stop = wait_to_go_on(fd, POLLIN, wake_fd, deadline)) return *stop;
  }
}

}  // namespace rankrun::rendezvous::tcp
