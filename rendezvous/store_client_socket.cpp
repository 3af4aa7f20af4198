// StoreClient's connection: connecting with retries, the socket's timeouts, the bytes both ways
// (tcp_connection.hpp's send_all and receive_exact), interrupt() and the socket's own address.
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <thread>
#include <utility>

#include "base/socket_address.hpp"
#include "rendezvous/store_client_impl.hpp"
#include "rendezvous/wire.hpp"

namespace rankrun::rendezvous {
namespace {

using std::chrono::milliseconds;
using tcp::Clock;
using tcp::deadline_after;
using tcp::errno_text;
using tcp::remaining_ms;

// No real reply comes near this; a larger length means the stream is not what we think.
constexpr std::uint64_t k_max_reply_value = std::uint64_t{1} << 32;

}  // namespace

void StoreClient::Impl::disconnect() {
  const std::lock_guard lock(fd_mutex);
  if (fd >= 0) ::close(fd);
  fd = -1;
}

void StoreClient::Impl::interrupt() {
  const std::lock_guard lock(fd_mutex);
  interrupted = true;
  if (fd >= 0) ::shutdown(fd, SHUT_RDWR);
}

void StoreClient::Impl::fail(const std::string& what, StoreFailure kind) {
  disconnect();
  throw StoreError(kind, "store " + where() + ": " + what, what);
}

std::string StoreClient::Impl::connect_once(Clock::time_point deadline) {
  tcp::ConnectOptions connect;
  connect.user_timeout = options.user_timeout;
  connect.wake_fd = options.cancel_fd;
  const auto connected = tcp::connect_once(host, port, deadline, connect);
  if (connected.woken)
    throw StoreError(StoreFailure::Interrupted, "store " + where() + ": interrupted", "interrupted",
                     StoreStage::Connect);
  if (connected.fd < 0) return connected.error;
  const int s = connected.fd;
  // Blocking from here on, with SO_RCVTIMEO/SO_SNDTIMEO as the deadline of ordinary
  // replies: one syscall per send and per reply instead of recv/EAGAIN/poll/recv.
  ::fcntl(s, F_SETFL, ::fcntl(s, F_GETFL) & ~O_NONBLOCK);
  const std::lock_guard lock(fd_mutex);
  fd = s;
  if (interrupted) ::shutdown(fd, SHUT_RDWR);
  return {};
}

bool StoreClient::Impl::cancelled() const {
  if (interrupted) return true;
  if (options.cancel_fd < 0) return false;
  pollfd p{options.cancel_fd, POLLIN, 0};
  return ::poll(&p, 1, 0) > 0;
}

void StoreClient::Impl::connect() {
  const auto deadline = deadline_after(options.connect_timeout);
  // Faster than torch's 500 ms start: a launcher's store is usually a few milliseconds from
  // being up.
  tcp::Backoff backoff;
  std::string why;
  StoreStage stage = StoreStage::Connect;
  for (;;) {
    if (cancelled())
      throw StoreError(StoreFailure::Interrupted, "store " + where() + ": interrupted", "interrupted", stage);
    why = connect_once(deadline);
    stage = StoreStage::Connect;
    if (why.empty()) {
      stage = StoreStage::Handshake;
      try {
        why = handshake(deadline);
      } catch (const StoreRefused&) {
        disconnect();
        throw;
      }
      if (why.empty()) {
        set_io_timeout(options.timeout);
        return;
      }
      disconnect();
      if (std::exchange(not_a_store, false)) {
        throw StoreNotAStore("the server at " + where() + " is not a store: " + why, why);
      }
    }
    if (Clock::now() >= deadline) break;
    const auto pause = backoff.next(milliseconds(remaining_ms(deadline)));
    if (options.cancel_fd >= 0) {
      pollfd p{options.cancel_fd, POLLIN, 0};
      ::poll(&p, 1, static_cast<int>(pause.count()));
    } else {
      std::this_thread::sleep_for(pause);
    }
  }
  // The last try's failure: no connection, or one whose handshake got no reply (or was closed).
  const auto kind = stage == StoreStage::Connect ? StoreFailure::Unreachable : handshake_failure;
  throw StoreError(kind,
                   "cannot connect to the store at " + where() + " within " +
                       std::to_string(options.connect_timeout.count()) + " ms: " + why,
                   why, stage);
}

void StoreClient::Impl::ensure_connected() {
  if (fd < 0) connect();
}

void StoreClient::Impl::set_io_timeout(milliseconds timeout) {
  // 0 would mean "no timeout" to the kernel.
  const auto ms = std::clamp<long long>(timeout.count(), 1, 100LL * 365 * 24 * 3600 * 1000);
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(ms / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms % 1000) * 1000);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  io_timeout = milliseconds(ms);
}

void StoreClient::Impl::send_all(std::string_view bytes) {
  // A blocking socket: each send() waits up to SO_SNDTIMEO (io_timeout) for room.
  switch (tcp::send_all(fd, bytes, -1, deadline_after(io_timeout))) {
    case tcp::Io::Done: return;
    case tcp::Io::TimedOut: {
      const auto what = "send timed out after " + std::to_string(io_timeout.count()) + " ms";
      throw StoreError(StoreFailure::NoReply, what, what);
    }
    case tcp::Io::Woken:
    case tcp::Io::Closed:
    case tcp::Io::Failed: break;
  }
  const int err = errno;
  const auto what = "send failed: " + errno_text(err);
  throw StoreError(err == EPIPE || err == ECONNRESET ? StoreFailure::Closed : StoreFailure::Failed, what, what);
}

void StoreClient::Impl::await_reply() {
  if (options.patience <= io_timeout) return;
  const auto start = Clock::now();
  const auto give_up = start + options.patience;
  for (;;) {
    switch (tcp::wait_for(fd, POLLIN, -1, std::min(give_up, deadline_after(io_timeout)))) {
      case tcp::Wait::Ready:
      case tcp::Wait::Failed: return;  // recv() says what it is
      case tcp::Wait::TimedOut:
      case tcp::Wait::Woken: break;
    }
    const auto waited = std::chrono::duration_cast<milliseconds>(Clock::now() - start);
    if (Clock::now() >= give_up) {
      const auto what = "no reply within " + std::to_string(waited.count()) +
                        " ms, on a connection the store host's system kept acknowledging (the store is "
                        "stopped or overloaded)";
      throw StoreError(StoreFailure::NoReply, what, what);
    }
    // Something sent is not acknowledged: the link or the host may be down, which a new
    // connection tells sooner than waiting on this one.
    if (!tcp::peer_has_everything(fd)) {
      const auto what = "no reply within " + std::to_string(waited.count()) + " ms";
      throw StoreError(StoreFailure::NoReply, what, what);
    }
    if (options.on_slow_reply) options.on_slow_reply(waited);
  }
}

void StoreClient::Impl::recv_exact(char* dest, std::size_t size) {
  await_reply();
  // A blocking socket: each recv() waits up to SO_RCVTIMEO (io_timeout) for bytes.
  switch (tcp::receive_exact(fd, dest, size, -1, deadline_after(io_timeout))) {
    case tcp::Io::Done: return;
    case tcp::Io::TimedOut: {
      const auto what = "no reply within " + std::to_string(io_timeout.count()) + " ms";
      throw StoreError(StoreFailure::NoReply, what, what);
    }
    case tcp::Io::Closed:
      throw StoreError(StoreFailure::Closed, "connection closed by the server", "connection closed by the server");
    case tcp::Io::Woken:
    case tcp::Io::Failed: break;
  }
  const int err = errno;
  const auto what = "receive failed: " + errno_text(err);
  throw StoreError(err == ECONNRESET ? StoreFailure::Closed : StoreFailure::Failed, what, what);
}

void StoreClient::Impl::send_request(const Request& r) {
  ensure_connected();
  out.clear();
  if (!encode_request(r, generation, out)) {
    throw StoreError("store " + where() + ": " + std::string(op_name(r.op)) + " is not part of protocol " +
                     std::string(to_string(generation)));
  }
  try {
    send_all(out);
  } catch (const StoreError& e) {
    fail(std::string(op_name(r.op)) + ": " + e.detail(), e.kind());
  }
}

void StoreClient::Impl::read_reply(char* dest, std::size_t size, std::string_view op) {
  try {
    recv_exact(dest, size);
  } catch (const StoreError& e) {
    fail(std::string(op) + ": " + e.detail(), e.kind());
  }
}

std::uint8_t StoreClient::Impl::read_u8(std::string_view op) {
  char b = 0;
  read_reply(&b, 1, op);
  return static_cast<std::uint8_t>(b);
}

std::int64_t StoreClient::Impl::read_int(std::string_view op) {
  char b[8];
  read_reply(b, 8, op);
  return read_i64(std::string_view(b, 8));
}

std::string StoreClient::Impl::read_value(std::string_view op) {
  const auto length = static_cast<std::uint64_t>(read_int(op));
  if (length > k_max_reply_value) fail(std::string(op) + ": reply of " + std::to_string(length) + " bytes");
  std::string v(static_cast<std::size_t>(length), '\0');
  if (length > 0) read_reply(v.data(), v.size(), op);
  return v;
}

std::string StoreClient::local_address() {
  m_impl->ensure_connected();
  std::string why;
  auto address = local_address_of(m_impl->fd, why);
  if (!address) m_impl->fail(why);
  return *address;
}

void StoreClient::interrupt() { m_impl->interrupt(); }

}  // namespace rankrun::rendezvous
