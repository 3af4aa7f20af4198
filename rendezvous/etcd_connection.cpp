// EtcdClient's connections to etcd: connecting (TCP, then TLS with https), the bytes sent and
// received, and interrupt(), which cuts any of it short from another thread.

#include <netdb.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "base/socket_address.hpp"
#include "rendezvous/etcd_client_impl.hpp"

namespace rankrun::rendezvous {
namespace {

using etcd_http::IoError;
using std::chrono::milliseconds;
using tcp::deadline_after;
using tcp::errno_text;
using tcp::remaining_ms;

// What one receive takes at most.
constexpr std::size_t k_recv_size = std::size_t{64} << 10;

}  // namespace

EtcdClient::Impl::Impl(std::string h, std::uint16_t p, std::string pre, EtcdOptions o)
    : host(std::move(h)), port(p), prefix(std::move(pre)), options(std::move(o)) {
  if (options.security) security = &options.security->impl();
  own_wake_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (own_wake_fd < 0) error(StoreFailure::Failed, "eventfd failed: " + errno_text(errno));
  wake_fd = own_wake_fd;
  if (options.cancel_fd >= 0) {
    // One descriptor to poll for both: an epoll set is readable while either member is.
    wake_fd = ::epoll_create1(EPOLL_CLOEXEC);
    epoll_event e{};
    e.events = EPOLLIN;
    if (wake_fd < 0 || ::epoll_ctl(wake_fd, EPOLL_CTL_ADD, own_wake_fd, &e) != 0 ||
        ::epoll_ctl(wake_fd, EPOLL_CTL_ADD, options.cancel_fd, &e) != 0) {
      const int err = errno;
      if (wake_fd >= 0) ::close(wake_fd);
      ::close(own_wake_fd);
      error(StoreFailure::Failed, "epoll failed: " + errno_text(err));
    }
  }
}

EtcdClient::Impl::~Impl() {
  close(main);
  close(watch);
  if (wake_fd != own_wake_fd) ::close(wake_fd);
  ::close(own_wake_fd);
}

void EtcdClient::Impl::close(Conn& c) {
  const std::lock_guard lock(fd_mutex);
  c.tls.reset();
  if (c.fd >= 0) ::close(c.fd);
  c.fd = -1;
  c.in.clear();
  c.pos = 0;
  c.used = false;
}

void EtcdClient::Impl::interrupt() {
  const std::lock_guard lock(fd_mutex);
  interrupted = true;
  const std::uint64_t one = 1;
  [[maybe_unused]] const auto n = ::write(own_wake_fd, &one, sizeof(one));
  for (const Conn* c : {&main, &watch}) {
    if (c->fd >= 0) ::shutdown(c->fd, SHUT_RDWR);
  }
}

void EtcdClient::Impl::error(StoreFailure kind, const std::string& detail) const {
  throw StoreError(kind, "etcd at " + where() + ": " + detail, detail);
}

void EtcdClient::Impl::deny_with(const std::string& detail) const {
  throw EtcdDenied("etcd at " + where() + ": " + detail, detail);
}

void EtcdClient::Impl::throw_interrupted() const { error(StoreFailure::Interrupted, "interrupted"); }

void EtcdClient::Impl::denied(Conn& c, std::string what) {
  close(c);
  deny_with(what);
}

void EtcdClient::Impl::fail(Conn& c, const std::string& what, StoreFailure kind) {
  close(c);
  error(kind, what);
}

void EtcdClient::Impl::io_failed(const std::string& what, StoreFailure kind) {
  if (interrupted) throw_interrupted();
  throw IoError(what, kind);
}

bool EtcdClient::Impl::woken() const {
  if (interrupted) return true;
  pollfd p{wake_fd, POLLIN, 0};
  return ::poll(&p, 1, 0) > 0;
}

void EtcdClient::Impl::pause(milliseconds duration) {
  pollfd p{wake_fd, POLLIN, 0};
  ::poll(&p, 1, static_cast<int>(std::clamp<long long>(duration.count(), 0, 1 << 30)));
  if (woken()) throw_interrupted();
}

std::string EtcdClient::Impl::connect_once(Conn& c, Clock::time_point deadline) {
  tcp::ConnectOptions connect;
  connect.user_timeout = options.user_timeout;
  connect.wake_fd = wake_fd;
  // interrupt() shuts down a connect in progress too.
  connect.adopt = [&](int fd) {
    if (fd < 0) {
      close(c);
      return;
    }
    const std::lock_guard lock(fd_mutex);
    c.fd = fd;
  };
  const auto connected = tcp::connect_once(host, port, deadline, connect);
  if (connected.woken) throw_interrupted();
  if (connected.fd < 0) return connected.error;
  c.in.clear();
  c.pos = 0;
  c.used = false;
  if (https()) return handshake(c, deadline);
  return {};
}

std::string EtcdClient::Impl::handshake(Conn& c, Clock::time_point deadline) {
  c.tls = std::make_unique<tls::Session>(*security->tls, c.fd, host);
  const auto io = c.tls->handshake(wake_fd, deadline);
  if (io == tcp::Io::Done) return {};
  if (interrupted || io == tcp::Io::Woken) {
    close(c);
    throw_interrupted();
  }
  if (io == tcp::Io::Failed && c.tls->permanent()) denied(c, "TLS handshake failed: " + c.tls->error());
  // An etcd that serves http closes the connection at a TLS hello, without a word.
  std::string why = io == tcp::Io::TimedOut ? "TLS handshake timed out"
                    : io == tcp::Io::Closed ? "connection closed during the TLS handshake (does etcd serve http there?)"
                                            : "TLS handshake failed: " + c.tls->error();
  close(c);
  return why;
}

void EtcdClient::Impl::open(Conn& c, Clock::time_point cap) {
  const auto deadline = std::min(deadline_after(options.connect_timeout), cap);
  tcp::Backoff backoff;
  std::string why;
  for (;;) {
    if (woken()) throw_interrupted();
    why = connect_once(c, deadline);
    if (why.empty()) return;
    if (Clock::now() >= deadline) break;
    pause(backoff.next(milliseconds(remaining_ms(deadline))));
  }
  throw StoreError(StoreFailure::Unreachable, "cannot reach etcd at " + where() + ": " + why, why, StoreStage::Connect);
}

void EtcdClient::Impl::ensure_fresh() {
  if (woken()) throw_interrupted();
  if (main.fd >= 0 && main.used) {
    pollfd p{main.fd, POLLIN, 0};
    // Over TLS, what came may be TLS's own (a session ticket), which leaves it fit for use.
    if (main.pos < main.in.size() || (::poll(&p, 1, 0) != 0 && !(main.tls && main.tls->idle_ok()))) close(main);
  }
  if (main.fd < 0) open(main, Clock::time_point::max());
}

void EtcdClient::Impl::send_all(Conn& c, std::string_view bytes, Clock::time_point deadline) {
  if (woken()) throw_interrupted();
  const auto io = c.tls ? c.tls->send_all(bytes, wake_fd, deadline) : tcp::send_all(c.fd, bytes, wake_fd, deadline);
  switch (io) {
    case tcp::Io::Done: return;
    case tcp::Io::TimedOut: io_failed("send timed out", StoreFailure::NoReply);
    case tcp::Io::Woken: throw_interrupted();
    case tcp::Io::Closed:
    case tcp::Io::Failed:
      if (c.tls) tls_failed(c, "send failed: ");
      io_failed("send failed: " + errno_text(errno));
  }
}

void EtcdClient::Impl::tls_failed(Conn& c, const std::string& what) {
  if (interrupted) throw_interrupted();
  if (c.tls->permanent()) denied(c, c.tls->error());
  const auto why = what + c.tls->error();
  io_failed(why);
}

bool EtcdClient::Impl::fill(Conn& c, Clock::time_point deadline) {
  if (c.pos == c.in.size()) {
    c.in.clear();
    c.pos = 0;
  } else if (c.pos >= k_recv_size) {
    c.in.erase(0, c.pos);
    c.pos = 0;
  }
  if (interrupted) throw_interrupted();
  const auto io = c.tls ? c.tls->receive_some(c.in, k_recv_size, wake_fd, deadline)
                        : tcp::receive_some(c.fd, c.in, k_recv_size, wake_fd, deadline);
  switch (io) {
    case tcp::Io::Done: return true;
    case tcp::Io::TimedOut: return false;
    case tcp::Io::Woken: throw_interrupted();
    case tcp::Io::Closed: io_failed("connection closed by etcd", StoreFailure::Closed);
    case tcp::Io::Failed:
      if (c.tls) tls_failed(c, "receive failed: ");
      io_failed("receive failed: " + errno_text(errno));
  }
  return false;
}

void EtcdClient::interrupt() { m_impl->interrupt(); }

std::string EtcdClient::local_address() {
  m_impl->ensure_fresh();
  std::string why;
  auto address = local_address_of(m_impl->main.fd, why);
  if (!address) m_impl->fail(m_impl->main, why);
  return *address;
}

}  // namespace rankrun::rendezvous
