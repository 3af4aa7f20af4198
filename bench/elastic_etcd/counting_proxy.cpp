#include "bench/elastic_etcd/counting_proxy.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string_view>

namespace rankrun::bench::etcd_bench {

CountingProxy::CountingProxy(std::uint16_t target) : m_target(target) {
  m_listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (m_listener < 0 || ::bind(m_listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(m_listener, 4096) != 0 || ::getsockname(m_listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    throw std::runtime_error("proxy listener: " + std::string(std::strerror(errno)));
  }
  m_port = ntohs(addr.sin_port);
  m_epoll = ::epoll_create1(EPOLL_CLOEXEC);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = nullptr;  // the listener
  ::epoll_ctl(m_epoll, EPOLL_CTL_ADD, m_listener, &ev);
  m_thread = std::thread([this] { run(); });
}

CountingProxy::~CountingProxy() {
  m_stop = true;
  if (m_thread.joinable()) m_thread.join();
  for (auto* link : m_links) {
    for (int fd : link->fd) {
      if (fd >= 0) ::close(fd);
    }
    delete link;
  }
  ::close(m_epoll);
  ::close(m_listener);
}

ProxyCounts CountingProxy::counts() const {
  ProxyCounts c;
  c.up = m_up.load();
  c.down = m_down.load();
  c.connections = m_connections.load();
  for (std::size_t i = 0; i < c.requests.size(); ++i) c.requests[i] = m_requests[i].load();
  return c;
}

std::string CountingProxy::error() const {
  const std::lock_guard lock(m_error_mutex);
  return m_error;
}

void CountingProxy::set_error(const std::string& e) {
  const std::lock_guard lock(m_error_mutex);
  if (m_error.empty()) m_error = e;
}

void CountingProxy::count_requests(Link& link, const char* data, std::size_t n) {
  std::string buf = link.carry;
  buf.append(data, n);
  std::size_t pos = 0;
  std::size_t keep = buf.size() > 8 ? buf.size() - 8 : 0;
  for (;;) {
    const auto p = buf.find("POST /v3/", pos);
    if (p == std::string::npos) break;
    const auto space = buf.find(' ', p + 5);
    if (space == std::string::npos) {
      keep = p;
      break;
    }
    const std::string_view path(buf.data() + p + 5, space - p - 5);
    std::size_t i = 0;
    while (i < k_paths.size() && path != k_paths[i]) ++i;
    ++m_requests[i];
    pos = space;
    keep = std::max(keep, space);
  }
  link.carry = buf.substr(std::min(keep, buf.size()));
  if (link.carry.size() > 256) link.carry.erase(0, link.carry.size() - 256);
}

void CountingProxy::watch_out(Link& link, int side, bool on) {
  auto& state = link.out_on[static_cast<std::size_t>(side)];
  if (state == on) return;
  state = on;
  epoll_event ev{};
  ev.events = EPOLLIN | (on ? EPOLLOUT : 0u);
  ev.data.ptr = &link.ends[static_cast<std::size_t>(side)];
  ::epoll_ctl(m_epoll, EPOLL_CTL_MOD, link.fd[static_cast<std::size_t>(side)], &ev);
}

// Writes what waits for `side`; false when its socket failed.
bool CountingProxy::flush(Link& link, int side) {
  auto& out = link.out[static_cast<std::size_t>(side)];
  const int fd = link.fd[static_cast<std::size_t>(side)];
  while (!out.empty()) {
    const ssize_t n = ::send(fd, out.data(), out.size(), MSG_NOSIGNAL);
    if (n > 0) {
      out.erase(0, static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      watch_out(link, side, true);
      return true;
    }
    return false;
  }
  watch_out(link, side, false);
  return true;
}

void CountingProxy::kill(Link& link) {
  if (link.dead) return;
  link.dead = true;
  for (int& fd : link.fd) {
    if (fd >= 0) {
      ::epoll_ctl(m_epoll, EPOLL_CTL_DEL, fd, nullptr);
      ::close(fd);
      fd = -1;
    }
  }
  m_dead.push_back(&link);
}

void CountingProxy::accept_all() {
  for (;;) {
    const int c = ::accept4(m_listener, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (c < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) set_error("accept: " + std::string(std::strerror(errno)));
      return;
    }
    // A blocking connect to etcd on loopback (immediate), then non-blocking.
    const int e = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(m_target);
    if (e < 0 || ::connect(e, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      set_error("proxy connect to etcd: " + std::string(std::strerror(errno)));
      if (e >= 0) ::close(e);
      ::close(c);
      continue;
    }
    ::fcntl(e, F_SETFL, ::fcntl(e, F_GETFL) | O_NONBLOCK);
    const int one = 1;
    ::setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    ::setsockopt(e, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    auto* link = new Link;
    link->fd = {c, e};
    for (int side = 0; side < 2; ++side) {
      link->ends[static_cast<std::size_t>(side)] = End{link, side};
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.ptr = &link->ends[static_cast<std::size_t>(side)];
      ::epoll_ctl(m_epoll, EPOLL_CTL_ADD, link->fd[static_cast<std::size_t>(side)], &ev);
    }
    m_links.push_back(link);
    ++m_connections;
  }
}

void CountingProxy::run() {
  std::vector<epoll_event> events(512);
  std::vector<char> buf(std::size_t{1} << 16);
  while (!m_stop) {
    const int n = ::epoll_wait(m_epoll, events.data(), static_cast<int>(events.size()), 100);
    if (n < 0) {
      if (errno == EINTR) continue;
      set_error("epoll_wait: " + std::string(std::strerror(errno)));
      return;
    }
    for (int k = 0; k < n; ++k) {
      const auto& ev = events[static_cast<std::size_t>(k)];
      if (ev.data.ptr == nullptr) {
        accept_all();
        continue;
      }
      auto* end = static_cast<End*>(ev.data.ptr);
      Link& link = *end->link;
      if (link.dead) continue;
      const int side = end->side;
      const int other = 1 - side;
      if (ev.events & EPOLLOUT) {
        if (!flush(link, side)) {
          kill(link);
          continue;
        }
      }
      if (ev.events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
        const ssize_t got = ::recv(link.fd[static_cast<std::size_t>(side)], buf.data(), buf.size(), 0);
        if (got > 0) {
          const auto bytes = static_cast<std::size_t>(got);
          if (side == 0) {
            m_up += bytes;
            count_requests(link, buf.data(), bytes);
          } else {
            m_down += bytes;
          }
          link.out[static_cast<std::size_t>(other)].append(buf.data(), bytes);
          if (!flush(link, other)) kill(link);
        } else if (got == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
          // One side ended (a watch ends by its client closing): what is left goes, best effort.
          (void)flush(link, other);
          kill(link);
        }
      }
    }
    for (auto* link : m_dead) {
      m_links.erase(std::remove(m_links.begin(), m_links.end(), link), m_links.end());
      delete link;
    }
    m_dead.clear();
    accept_all();
  }
}

}  // namespace rankrun::bench::etcd_bench
