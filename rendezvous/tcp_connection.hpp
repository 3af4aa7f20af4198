#pragma once
// The TCP plumbing both blocking clients share (store_client.cpp, etcd_connection.cpp):
// deadlines, resolving and connecting within a deadline, waiting on a socket that another thread
// may cut short (a wake-up descriptor), TCP liveness, and the connect retry's backoff. POSIX
// sockets; nothing here throws: each client words its own errors.

#include <chrono>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <string_view>

namespace rankrun::rendezvous::tcp {

using Clock = std::chrono::steady_clock;

/// strerror(err).
std::string errno_text(int err);

/// Milliseconds left until `deadline`, rounded up (poll() must not come back before it),
/// between 0 and 2^30.
int remaining_ms(Clock::time_point deadline);

/// now + `timeout`, saturating: "wait forever" is often spelled as a huge duration.
Clock::time_point deadline_after(std::chrono::milliseconds timeout);

/// "host:port", or "[host]:port" for an IPv6 address.
std::string endpoint_name(const std::string& host, std::uint16_t port);

enum class Wait : std::uint8_t { Ready, TimedOut, Woken, Failed };

/// Waits until `fd` has one of `events`, `wake_fd` (when >= 0) is readable, or `deadline`
/// passes. Failed: poll() failed (errno says why; EINTR is retried).
Wait wait_for(int fd, short events, int wake_fd, Clock::time_point deadline);

struct ConnectOptions {
  /// Non-zero: TCP_USER_TIMEOUT and keep-alive probes, so that a silent peer fails the
  /// connection after about this long, also while the connection is idle.
  std::chrono::milliseconds user_timeout{0};
  /// Readable: give up at once (another thread's interrupt()); -1: none.
  int wake_fd = -1;
  /// Called with each socket before it connects, and with -1 once a failed one is closed, so
  /// that another thread may shut a connect in progress down.
  std::function<void(int)> adopt;
};

struct Connected {
  /// The connected socket (non-blocking, close-on-exec, TCP_NODELAY); -1 when none.
  int fd = -1;
  /// Why the last address failed: "cannot resolve host: ...", strerror's text, "no address".
  std::string error;
  /// The wake-up descriptor cut the connect short (fd is -1).
  bool woken = false;
};

/// One attempt over every address `host` resolves to (names, IPv4, IPv6), each bounded by
/// `deadline`.
Connected connect_once(const std::string& host, std::uint16_t port, Clock::time_point deadline,
                       const ConnectOptions& options = {});

/// The liveness settings of ConnectOptions::user_timeout on a socket.
void set_liveness(int fd, std::chrono::milliseconds user_timeout);

/// The connection is established and the peer's kernel has acknowledged every byte sent on it:
/// a reply that is late is the peer process's (slow, or stopped), not a link that is down.
bool peer_has_everything(int fd);

/// The pauses between connect attempts: 20 ms growing by 1.5 up to 1 s, each with a jitter
/// of 0.5 to 1.5 so that thousands of clients retrying together spread out.
class Backoff {
 public:
  /// The next pause, at most `cap`.
  std::chrono::milliseconds next(std::chrono::milliseconds cap);

 private:
  std::chrono::milliseconds m_step{20};
  std::minstd_rand m_rng{std::random_device{}()};
};

enum class Io : std::uint8_t { Done, TimedOut, Woken, Closed, Failed };

/// Sends every byte of `bytes`, waiting for room until `deadline` (on a non-blocking socket; on a
/// blocking one each send() waits up to its SO_SNDTIMEO first). Failed: errno says why.
Io send_all(int fd, std::string_view bytes, int wake_fd, Clock::time_point deadline);

/// Receives exactly `size` bytes into `dest`, waiting until `deadline` (as send_all, on either
/// kind of socket). Closed: the peer ended the stream first; Failed: errno says why.
Io receive_exact(int fd, char* dest, std::size_t size, int wake_fd, Clock::time_point deadline);

/// Receives what is there (up to `max` bytes, appended to `out`) on a non-blocking socket,
/// waiting until `deadline`. Done: at least one byte; Closed: the peer ended the stream;
/// Failed: errno says why.
Io receive_some(int fd, std::string& out, std::size_t max, int wake_fd, Clock::time_point deadline);

}  // namespace rankrun::rendezvous::tcp
