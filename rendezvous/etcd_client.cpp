#include "rendezvous/etcd_client.hpp"

#include <netdb.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/buffer.hpp>
#include <boost/beast/core/buffer_traits.hpp>
#include <boost/beast/core/buffers_range.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/serializer.hpp>
#include <boost/beast/http/string_body.hpp>
#include <cerrno>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <set>

#include "rendezvous/etcd_json.hpp"
#include "rendezvous/store_state.hpp"  // parse_stored_integer: add() reads numbers as the store does
#include "rendezvous/tcp_connection.hpp"
#include "rendezvous/tls_connection.hpp"

namespace rankrun::rendezvous {
namespace {

using std::chrono::milliseconds;
using tcp::Clock;
using tcp::deadline_after;
using tcp::errno_text;
using tcp::remaining_ms;
namespace http = boost::beast::http;

// Bounds on what etcd sends. Its replies to us stay far below them (etcd refuses requests over
// 1.5 MiB by default), so past them the stream is not what we think it is.
constexpr std::size_t k_max_body = std::size_t{4} << 20;
constexpr std::size_t k_max_head = std::size_t{64} << 10;
constexpr std::size_t k_max_line = std::size_t{8} << 10;
constexpr std::size_t k_recv_size = std::size_t{64} << 10;

// A transport failure inside a request; the caller drops the connection and names the request.
struct IoError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

// For error messages: at most `limit` bytes, non-printable ones as '?'.
std::string printable(std::string_view text, std::size_t limit = 200) {
  std::string out;
  for (char c : text.substr(0, limit)) out.push_back(c >= 0x20 && c < 0x7F ? c : '?');
  if (text.size() > limit) out += "...";
  return out;
}

std::string quote_key(std::string_view key) { return "'" + printable(key, 64) + "'"; }

std::string describe_keys(const std::vector<std::string>& keys) {
  std::string text;
  for (std::size_t i = 0; i < keys.size() && i < 8; ++i) text += (i ? ", " : "") + quote_key(keys[i]);
  if (keys.size() > 8) text += ", ... (" + std::to_string(keys.size()) + " keys)";
  return text;
}

boost::beast::string_view beast_view(std::string_view text) { return {text.data(), text.size()}; }

// A POST of a JSON body as HTTP/1.1 puts it on the wire: Beast's request, written by its
// serializer into one buffer (the connections here are not Asio streams), which goes out in one
// send. The fields in this order: Host, Authorization (with a token), Content-Type,
// Content-Length.
std::string post_request(std::string_view host, std::string_view path, std::string_view body,
                         std::optional<std::string_view> token) {
  http::request<http::string_body> request{http::verb::post, beast_view(path), 11};
  request.set(http::field::host, beast_view(host));
  if (token) request.set(http::field::authorization, beast_view(*token));
  request.set(http::field::content_type, "application/json");
  request.body().assign(body.data(), body.size());
  request.prepare_payload();
  std::string out;
  out.reserve(256 + body.size());
  http::serializer<true, http::string_body> serializer(request);
  boost::beast::error_code ec;
  while (!ec && !serializer.is_done()) {
    serializer.next(ec, [&](boost::beast::error_code&, const auto& buffers) {
      for (const auto buffer : boost::beast::buffers_range_ref(buffers)) {
        out.append(static_cast<const char*>(buffer.data()), buffer.size());
      }
      serializer.consume(boost::beast::buffer_bytes(buffers));
    });
  }
  // A string body cannot fail to serialize.
  if (ec) throw IoError("cannot write the request: " + ec.message());
  return out;
}

// One response being read: Beast's parser, which the client feeds from its own buffer (see
// Impl::step), the bytes of the header it has taken so far, and the chunks it has seen.
struct Response {
  http::response_parser<http::string_body> parser;
  std::size_t head_bytes = 0;
  std::size_t chunks = 0;
  std::string why;  // an error found by a callback of ours, in our words

  Response() {
    parser.header_limit(static_cast<std::uint32_t>(k_max_head));
    parser.body_limit(std::uint64_t{k_max_body});
    parser.on_chunk_header(count_chunk);  // kept by reference
  }
  Response(const Response&) = delete;
  Response& operator=(const Response&) = delete;

 private:
  std::function<void(std::uint64_t, boost::beast::string_view, boost::beast::error_code&)> count_chunk =
      [this](std::uint64_t, boost::beast::string_view, boost::beast::error_code&) { ++chunks; };
};

struct Reply {
  int status = 0;
  std::string body;
};

enum class WatchEnd { Seen, TimedOut, Compacted, AuthExpired };

bool contains(std::string_view text, std::string_view part) { return text.find(part) != std::string_view::npos; }

// etcd's words for a token it no longer takes: expired or unknown (gRPC Unauthenticated), or
// issued before a change of users or roles. Asked before anything is applied: a request that
// gets them may be sent again with a fresh token.
bool token_refused(std::int64_t code, std::string_view message) {
  return code == 16 || contains(message, "invalid auth token") || contains(message, "auth store is old");
}

// A watch cancelled with one of those (its reason is gRPC's text: "rpc error: code =
// Unauthenticated desc = etcdserver: invalid auth token").
bool token_refused(std::string_view cancel_reason) {
  return contains(cancel_reason, "Unauthenticated") || contains(cancel_reason, "invalid auth token") ||
         contains(cancel_reason, "auth store is old");
}

// Characters a token may hold in a header (etcd's simple tokens and JWTs stay far inside them).
bool header_safe(std::string_view token) {
  return !token.empty() && token.size() <= 4096 &&
         std::all_of(token.begin(), token.end(), [](char c) { return c > 0x20 && c < 0x7F; });
}

}  // namespace

struct EtcdSecurity::Impl {
  EtcdAccess access;
  std::unique_ptr<tls::Context> tls;  // with https
  std::mutex mutex;
  std::string token;  // the user's, shared by every client; empty until the first connect
};

EtcdSecurity::EtcdSecurity(EtcdAccess access) : m_impl(std::make_unique<Impl>()) {
  if (!access.https && (!access.cacert.empty() || !access.cert.empty() || !access.key.empty())) {
    throw StoreError("cacert=, cert= and key= are for https; give protocol=https");
  }
  if (access.user.empty() != access.password.empty()) {
    throw StoreError(access.user.empty() ? "a password is given without a user"
                                         : "user=" + access.user + " has no password");
  }
  if (access.https) {
    try {
      m_impl->tls = std::make_unique<tls::Context>(tls::Files{access.cacert, access.cert, access.key});
    } catch (const tls::SetupError& e) {
      throw StoreError(e.what());
    }
  }
  m_impl->access = std::move(access);
}

EtcdSecurity::~EtcdSecurity() = default;

const EtcdAccess& EtcdSecurity::access() const { return m_impl->access; }

struct EtcdClient::Impl {
  // One TCP connection and what it received that is not consumed yet.
  struct Conn {
    int fd = -1;
    std::string in;
    std::size_t pos = 0;
    bool used = false;                  // carried a request: etcd may have closed it since
    std::unique_ptr<tls::Session> tls;  // with https, once the handshake is done
  };

  std::string host;
  std::uint16_t port;
  std::string prefix;
  EtcdOptions options;
  Conn main;   // requests and replies, kept alive between calls
  Conn watch;  // one watch stream, open only while wait() or wait_deleted() waits
  // interrupt() writes it: every poll watches it, so a blocked call wakes whatever it waits on
  // (connect and backoff included).
  int wake_fd = -1;
  int own_wake_fd = -1;  // interrupt()'s; wake_fd is it, or an epoll set of it and cancel_fd
  // interrupt() may come from another thread: it and every change of a socket hold this mutex.
  std::mutex fd_mutex;
  std::atomic<bool> interrupted{false};
  // With options.security: its parts, and the token the last request carried.
  EtcdSecurity::Impl* security = nullptr;
  std::string sent_token;

  Impl(std::string h, std::uint16_t p, std::string pre, EtcdOptions o)
      : host(std::move(h)), port(p), prefix(std::move(pre)), options(std::move(o)) {
    if (options.security) security = &options.security->impl();
    own_wake_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (own_wake_fd < 0) throw StoreError("etcd at " + where() + ": eventfd failed: " + errno_text(errno));
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
        throw StoreError("etcd at " + where() + ": epoll failed: " + errno_text(err));
      }
    }
  }
  ~Impl() {
    close(main);
    close(watch);
    if (wake_fd != own_wake_fd) ::close(wake_fd);
    ::close(own_wake_fd);
  }
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  std::string where() const { return tcp::endpoint_name(host, port); }

  std::string full(std::string_view key) const { return prefix + std::string(key); }

  void close(Conn& c) {
    const std::lock_guard lock(fd_mutex);
    c.tls.reset();
    if (c.fd >= 0) ::close(c.fd);
    c.fd = -1;
    c.in.clear();
    c.pos = 0;
    c.used = false;
  }

  void interrupt() {
    const std::lock_guard lock(fd_mutex);
    interrupted = true;
    const std::uint64_t one = 1;
    [[maybe_unused]] const auto n = ::write(own_wake_fd, &one, sizeof(one));
    for (const Conn* c : {&main, &watch}) {
      if (c->fd >= 0) ::shutdown(c->fd, SHUT_RDWR);
    }
  }

  [[noreturn]] void throw_interrupted() const { throw StoreError("etcd at " + where() + ": interrupted"); }

  bool https() const { return security != nullptr && security->tls != nullptr; }
  bool authenticating() const { return security != nullptr && !security->access.user.empty(); }

  // A TLS failure that trying again cannot change.
  [[noreturn]] void denied(Conn& c, std::string what) {  // a copy: `what` may be the session's own
    close(c);
    throw EtcdDenied("etcd at " + where() + ": " + what);
  }

  [[noreturn]] void fail(Conn& c, const std::string& what) {
    close(c);
    throw StoreError("etcd at " + where() + ": " + what);
  }

  // A failure of a socket that interrupt() shut down is the interrupt.
  [[noreturn]] void io_failed(const std::string& what) {
    if (interrupted) throw_interrupted();
    throw IoError(what);
  }

  // interrupt() was called, or the owner's cancel_fd is readable.
  bool woken() const {
    if (interrupted) return true;
    pollfd p{wake_fd, POLLIN, 0};
    return ::poll(&p, 1, 0) > 0;
  }

  void pause(milliseconds duration) {
    pollfd p{wake_fd, POLLIN, 0};
    ::poll(&p, 1, static_cast<int>(std::clamp<long long>(duration.count(), 0, 1 << 30)));
    if (woken()) throw_interrupted();
  }

  // --- connecting -------------------------------------------------------------------------

  // One attempt over every resolved address; empty string on success, else why it failed.
  // The socket stays non-blocking: every wait is a poll() with the call's deadline.
  std::string connect_once(Conn& c, Clock::time_point deadline) {
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

  // TLS on the connection just made; empty string on success, else why it failed (the
  // connection is closed then). EtcdDenied when trying again cannot help.
  std::string handshake(Conn& c, Clock::time_point deadline) {
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
                      : io == tcp::Io::Closed
                          ? "connection closed during the TLS handshake (does etcd serve http there?)"
                          : "TLS handshake failed: " + c.tls->error();
    close(c);
    return why;
  }

  void open(Conn& c, Clock::time_point cap) {
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
    throw StoreError("cannot reach etcd at " + where() + ": " + why);
  }

  // The request connection, ready for a request. A kept-alive connection that has become
  // readable between requests was closed (or reset) by etcd, or carries bytes no request of
  // ours asked for: it is replaced before sending rather than a request being resent after a
  // failure, since etcd may have applied it.
  void ensure_fresh() {
    if (woken()) throw_interrupted();
    if (main.fd >= 0 && main.used) {
      pollfd p{main.fd, POLLIN, 0};
      // Over TLS, what came may be TLS's own (a session ticket), which leaves it fit for use.
      if (main.pos < main.in.size() || (::poll(&p, 1, 0) != 0 && !(main.tls && main.tls->idle_ok()))) close(main);
    }
    if (main.fd < 0) open(main, Clock::time_point::max());
  }

  // --- bytes ---------------------------------------------------------------------------------

  void send_all(Conn& c, std::string_view bytes, Clock::time_point deadline) {
    if (woken()) throw_interrupted();
    const auto io = c.tls ? c.tls->send_all(bytes, wake_fd, deadline) : tcp::send_all(c.fd, bytes, wake_fd, deadline);
    switch (io) {
      case tcp::Io::Done: return;
      case tcp::Io::TimedOut: io_failed("send timed out");
      case tcp::Io::Woken: throw_interrupted();
      case tcp::Io::Closed:
      case tcp::Io::Failed:
        if (c.tls) tls_failed(c, "send failed: ");
        io_failed("send failed: " + errno_text(errno));
    }
  }

  // A TLS connection failed: etcd's alert (our certificate refused) is EtcdDenied.
  [[noreturn]] void tls_failed(Conn& c, const std::string& what) {
    if (interrupted) throw_interrupted();
    if (c.tls->permanent()) denied(c, c.tls->error());
    const auto why = what + c.tls->error();
    io_failed(why);
  }

  // Receives what is there (waiting up to `deadline`); false on timeout.
  bool fill(Conn& c, Clock::time_point deadline) {
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
      case tcp::Io::Closed: io_failed("connection closed by etcd");
      case tcp::Io::Failed:
        if (c.tls) tls_failed(c, "receive failed: ");
        io_failed("receive failed: " + errno_text(errno));
    }
    return false;
  }

  // --- HTTP/1.1 --------------------------------------------------------------------------------

  void send_post(Conn& c, std::string_view path, std::string_view body, Clock::time_point deadline,
                 bool with_token = true) {
    std::optional<std::string_view> token;
    if (with_token && authenticating()) {
      {
        const std::lock_guard lock(security->mutex);
        sent_token = security->token;
      }
      token = sent_token;
    }
    const auto request = post_request(where(), path, body, token);
    c.used = true;
    send_all(c, request, deadline);
  }

  // Gives the parser what `c` holds, one step of it (the header, or a piece of the body or of a
  // chunk); false when it needs more bytes than that. Beast does the framing; bounded here are
  // what its limits do not cover: the header as a whole (its header_limit bounds what one put()
  // sees) and each line of it. The header is given whole lines only, so that a peer that is not
  // an HTTP server fails at its first line, not after a header that never ends.
  bool step(Conn& c, Response& r) {
    auto& parser = r.parser;
    if (parser.is_done()) return false;
    std::string_view bytes(c.in.data() + c.pos, c.in.size() - c.pos);
    const bool in_head = !parser.is_header_done();
    std::size_t partial = 0;  // a line of the header not ended yet, while the header is not
    if (in_head) {
      const auto end = bytes.rfind("\r\n");
      const std::size_t lines = end == std::string_view::npos ? 0 : end + 2;
      partial = bytes.size() - lines;
      bytes = bytes.substr(0, std::min(lines, k_max_head - r.head_bytes));
    }
    boost::beast::error_code ec = http::error::need_more;
    std::size_t used = 0;
    if (!bytes.empty()) used = parser.put(boost::asio::buffer(bytes.data(), bytes.size()), ec);
    c.pos += used;
    if (in_head) r.head_bytes += used;
    if (ec == http::error::need_more) {
      // What the parser has looked at without taking: the header so far, or a chunk's size
      // line or the trailers (a body's bytes are taken as they come).
      const auto waiting = bytes.size() - used;
      if (!parser.is_header_done()) {
        if (partial > k_max_line) throw IoError("line of the response over " + std::to_string(k_max_line) + " bytes");
        if (r.head_bytes + waiting < k_max_head) return false;
        ec = http::error::header_limit;
      } else {
        if (waiting <= k_max_head) return false;
        throw IoError("chunk size line or trailers over " + std::to_string(k_max_head) + " bytes");
      }
    }
    if (ec) throw IoError(describe(c, r, ec));
    if (in_head && parser.is_header_done()) check_head(r);
    return used > 0;
  }

  // Feeds the parser until `done()`; false at `deadline`.
  template <typename Done>
  bool read_until(Conn& c, Response& r, Clock::time_point deadline, Done done) {
    for (;;) {
      while (!done() && step(c, r)) {
      }
      if (done()) return true;
      if (!fill(c, deadline)) return false;
    }
  }

  // What Beast accepts and we do not.
  static void check_head(const Response& r) {
    const auto& head = r.parser.get();
    // We never send "Expect: 100-continue"; nothing else may come before the answer.
    if (head.result_int() < 200) throw IoError("unexpected HTTP status " + std::to_string(head.result_int()));
    std::size_t longest = head.reason().size() + 13;  // "HTTP/1.1 200 " and the reason
    for (const auto& field : head) longest = std::max(longest, field.name_string().size() + 2 + field.value().size());
    if (longest + 2 > k_max_line) throw IoError("line of the response over " + std::to_string(k_max_line) + " bytes");
    // Only "chunked" (what Go's server sends) is understood.
    if (const auto te = head.find(http::field::transfer_encoding); te != head.end() && !r.parser.chunked()) {
      throw IoError("unsupported Transfer-Encoding '" + printable({te->value().data(), te->value().size()}, 40) + "'");
    }
    // A body that runs to the end of the connection: Go's server never sends one to an HTTP/1.1
    // request.
    if (r.parser.need_eof()) throw IoError("response with neither Content-Length nor chunked encoding");
  }

  // Beast's error, in words that say where in the response it is.
  static std::string describe(const Conn& c, const Response& r, boost::beast::error_code ec) {
    if (!r.why.empty()) return r.why;
    std::string_view rest(c.in.data() + c.pos, c.in.size() - c.pos);  // where the parser stopped
    const auto line = [&] { return printable(rest.substr(0, rest.find("\r\n")), 80); };
    if (ec == http::error::header_limit) return "response headers over " + std::to_string(k_max_head) + " bytes";
    if (ec == http::error::body_limit) {
      if (r.parser.chunked()) return "response body over " + std::to_string(k_max_body) + " bytes";
      return "response body of " + std::to_string(r.parser.content_length().value_or(0)) + " bytes";
    }
    if (ec == http::error::bad_version || ec == http::error::bad_status || ec == http::error::bad_reason) {
      return "malformed status line '" + line() + "' (" + ec.message() + ")";
    }
    if (ec == http::error::bad_content_length) return "malformed Content-Length (" + ec.message() + ")";
    if (ec == http::error::bad_chunk || ec == http::error::bad_chunk_extension) {
      // Beast reads a chunk's closing CRLF with the next chunk's size line.
      if (rest.substr(0, 2) == "\r\n") {
        rest.remove_prefix(2);
      } else if (r.chunks > 0) {
        return "malformed chunk: no CRLF after its data";
      }
      return "malformed chunk size '" + line() + "' (" + ec.message() + ")";
    }
    return "malformed HTTP response (" + ec.message() + ")";
  }

  // One POST on the request connection, bounded by options.timeout. When etcd no longer takes
  // the user's token, a fresh one is taken and the request sent once more (etcd refused it
  // before applying it).
  Reply exchange(std::string_view path, std::string_view body) {
    auto reply = exchange_once(path, body, true);
    if (authenticating() && token_refused(reply)) {
      renew_token();
      reply = exchange_once(path, body, true);
    }
    return reply;
  }

  static bool token_refused(const Reply& reply) {
    // Errors are short; a 200 reply carries one only inside a stream's message.
    if (reply.status == 200 && !contains(reply.body, "\"error\"")) return false;
    const auto json = parse_json(reply.body, k_max_body);
    const auto error = json ? etcd::parse_error(*json) : std::nullopt;
    return error && rankrun::rendezvous::token_refused(error->code, error->message);
  }

  // --- etcd's user authentication ----------------------------------------------------------------

  // A token for the user, unless another client of the same EtcdSecurity took one since this
  // one's last request.
  void renew_token() {
    {
      const std::lock_guard lock(security->mutex);
      if (!security->token.empty() && security->token != sent_token) return;
    }
    auto token = authenticate();
    const std::lock_guard lock(security->mutex);
    security->token = std::move(token);
  }

  std::string authenticate() {
    const auto& access = security->access;
    const auto request = etcd::authenticate_request(access.user, access.password);
    if (!request) throw EtcdDenied("etcd at " + where() + ": the user name or password is not UTF-8 text");
    const auto reply = exchange_once("/v3/auth/authenticate", *request, false);
    const auto json = parse_json(reply.body, k_max_body);
    if (reply.status != 200 || (json && json_member(*json, "error") != nullptr)) {
      const auto error = json ? etcd::parse_error(*json) : std::nullopt;
      const std::string who = "user '" + printable(access.user, 64) + "'";
      if (error && contains(error->message, "authentication is not enabled")) {
        throw EtcdDenied(
            "etcd at " + where() + ": its authentication is off, so " + who +
            " would protect nothing: turn it on (etcdctl auth enable) or leave user= and password_file= out");
      }
      if (error && (contains(error->message, "authentication failed") || contains(error->message, "password"))) {
        throw EtcdDenied("etcd at " + where() + ": " + who + " could not log in: " + printable(error->message) +
                         "; check the user name and " +
                         (access.password_origin.empty() ? std::string("its password") : access.password_origin));
      }
      refused("/v3/auth/authenticate", reply, json);
    }
    auto token = json ? etcd::parse_authenticate_response(*json) : std::nullopt;
    if (!token || !header_safe(*token)) malformed("/v3/auth/authenticate", "no token");
    return std::move(*token);
  }

  // With TLS or a user: the first connect proves them (a token taken once for every client of
  // the EtcdSecurity, and one read of the client's prefix), so that what etcd refuses is known
  // before the client is used.
  void prove() {
    if (authenticating()) {
      bool have = false;
      {
        const std::lock_guard lock(security->mutex);
        have = !security->token.empty();
      }
      if (!have) renew_token();
    }
    if (!prefix.empty()) (void)range(prefix, true);
  }

  // What etcd said that trying again cannot change, in words that say what to do.
  [[noreturn]] void deny(const std::string& at, std::string_view message) const {
    if (contains(message, "user name is empty")) {
      throw EtcdDenied(at + "etcd has authentication on (" + printable(message) +
                       "): give user=NAME,password_file=PATH");
    }
    if (!authenticating()) {
      throw EtcdDenied(at + "etcd refused a client without a user (" + printable(message) +
                       "): its authentication is on; give user=NAME,password_file=PATH");
    }
    throw EtcdDenied(
        at + "user '" + printable(security->access.user, 64) + "' may not use the keys under '" +
        printable(prefix, 64) + "' (" + printable(message) +
        "): grant its role readwrite on them (etcdctl role grant-permission ROLE --prefix=true readwrite " +
        printable(prefix, 64) + ")");
  }

  static bool denial(std::string_view message) {
    return contains(message, "permission denied") || contains(message, "user name is empty");
  }

  // etcd's refusals that no retry changes: EtcdDenied.
  void throw_if_denied(const std::string& at, const Reply& reply, const std::optional<JsonValue>& json) const {
    const auto error = json ? etcd::parse_error(*json) : std::nullopt;
    if (error && (error->code == 7 || denial(error->message))) deny(at, error->message);
    if (reply.status == 400 && contains(reply.body, "CommonName of client")) {
      const auto& cert = security && security->tls ? security->tls->files().cert : std::string();
      const auto subject = security && security->tls ? security->tls->cert_subject() : std::string();
      throw EtcdDenied(
          at +
          "etcd refuses requests to its JSON gateway over a client certificate with a Common Name while "
          "its authentication is on (" +
          (cert.empty() ? std::string("HTTP 400") : "cert=" + cert + ": " + subject) +
          "): issue the client certificate with no CN (e.g. openssl req -subj /O=NAME) and log in with user= "
          "and password_file=");
    }
  }

  Reply exchange_once(std::string_view path, std::string_view body, bool with_token) {
    ensure_fresh();
    const auto deadline = deadline_after(options.timeout);
    try {
      send_post(main, path, body, deadline, with_token);
      Response r;
      if (!read_until(main, r, deadline, [&] { return r.parser.is_done(); })) {
        throw IoError("no reply within " + std::to_string(options.timeout.count()) + " ms");
      }
      if (!r.parser.keep_alive()) close(main);
      return {static_cast<int>(r.parser.get().result_int()), std::move(r.parser.get().body())};
    } catch (const IoError& e) {
      fail(main, "POST " + std::string(path) + ": " + e.what());
    }
  }

  // What a reply other than 200 (or a 200 carrying an error) says went wrong.
  static std::string describe_error(int status, const std::optional<JsonValue>& json, std::string_view body) {
    if (json) {
      if (auto error = etcd::parse_error(*json)) {
        // A stream's error comes inside a 200 reply: its HTTP status says nothing.
        return error->message + " (" + (status != 200 ? "HTTP " + std::to_string(status) + ", " : std::string()) +
               "gRPC code " + std::to_string(error->code) + ")";
      }
    }
    return "HTTP " + std::to_string(status) + ": " + printable(trim(body));
  }

  // A POST whose reply is one JSON object; etcd's errors and malformed replies throw.
  JsonValue call(std::string_view path, std::string_view body) {
    const auto reply = exchange(path, body);
    auto json = parse_json(reply.body, k_max_body);
    if (reply.status != 200) refused(path, reply, json);
    if (!json || !json->is_object()) malformed(path, "'" + printable(reply.body, 120) + "'");
    if (json_member(*json, "error") != nullptr) refused(path, reply, json);
    return std::move(*json);
  }

  // etcd answered, with an error: the connection stays.
  [[noreturn]] void refused(std::string_view path, const Reply& reply, const std::optional<JsonValue>& json) const {
    const std::string at = "etcd at " + where() + ": POST " + std::string(path) + ": ";
    throw_if_denied(at, reply, json);
    throw StoreError(at + describe_error(reply.status, json, reply.body));
  }

  [[noreturn]] void malformed(std::string_view path, std::string_view detail = "not in the shape etcd sends") {
    fail(main, "POST " + std::string(path) + ": malformed reply: " + std::string(detail));
  }

  // --- etcd operations -------------------------------------------------------------------------

  etcd::RangeResult range(const std::string& full_key, bool keys_only) {
    const auto json = call("/v3/kv/range", etcd::range_request(full_key, {}, keys_only));
    auto result = etcd::parse_range_response(json);
    if (!result || result->kvs.size() > 1) malformed("/v3/kv/range");
    return std::move(*result);
  }

  etcd::TxnResult txn(const std::string& body) {
    const auto json = call("/v3/kv/txn", body);
    auto result = etcd::parse_txn_response(json);
    if (!result) malformed("/v3/kv/txn");
    return std::move(*result);
  }

  // Each key's state (nullopt: missing) and the revision it was read at; one txn per
  // k_max_txn_ops keys.
  struct Presence {
    std::vector<std::optional<etcd::KeyValue>> kvs;
    std::vector<std::int64_t> revisions;
  };
  Presence read_keys(const std::vector<std::string>& full_keys, bool keys_only) {
    Presence out;
    for (std::size_t first = 0; first < full_keys.size(); first += etcd::k_max_txn_ops) {
      const auto last = std::min(full_keys.size(), first + etcd::k_max_txn_ops);
      const std::vector<std::string> chunk(full_keys.begin() + static_cast<std::ptrdiff_t>(first),
                                           full_keys.begin() + static_cast<std::ptrdiff_t>(last));
      const auto result = txn(etcd::txn_range_request(chunk, keys_only));
      if (!result.succeeded || result.responses.size() != chunk.size()) malformed("/v3/kv/txn");
      for (const auto& op : result.responses) {
        if (op.kind != etcd::TxnOp::Kind::Range || op.kvs.size() > 1) malformed("/v3/kv/txn");
        out.kvs.push_back(op.kvs.empty() ? std::nullopt : std::optional(op.kvs[0]));
        out.revisions.push_back(result.revision);
      }
    }
    return out;
  }

  // Read-modify-write of one key: `next` maps the current value (nullopt: missing) to the new
  // one, retried until no other writer came in between.
  template <typename Next>
  void read_modify_write(std::string_view key, std::string_view what, Next next) {
    const auto full_key = full(key);
    const auto deadline = deadline_after(options.timeout);
    auto found = range(full_key, false);
    std::optional<etcd::KeyValue> current;
    if (!found.kvs.empty()) current = std::move(found.kvs[0]);
    for (;;) {
      const std::string value = next(current ? std::optional<std::string>(current->value) : std::nullopt);
      const auto result = txn(etcd::swap_request(full_key, current ? current->mod_revision : 0, value));
      auto swap = etcd::swap_result(result);
      if (!swap) malformed("/v3/kv/txn");
      if (swap->succeeded) return;
      current = std::move(swap->current);
      if (Clock::now() >= deadline) {
        throw StoreError("etcd at " + where() + ": " + std::string(what) + " on key " + quote_key(key) +
                         ": other writers kept changing it for " + std::to_string(options.timeout.count()) + " ms");
      }
    }
  }

  // A watch stream of the create requests in `body`, on a connection of its own that is closed
  // when this returns (closing is how a gateway watch ends): each event goes to `on_event`,
  // which returns true to end the watch (Seen); TimedOut at `deadline`.
  template <typename OnEvent>
  WatchEnd watch_stream(const std::string& body, Clock::time_point deadline, OnEvent on_event) {
    auto end = watch_stream_once(body, deadline, on_event);
    if (end != WatchEnd::AuthExpired) return end;
    renew_token();
    end = watch_stream_once(body, deadline, on_event);
    if (end == WatchEnd::AuthExpired)
      throw StoreError("etcd at " + where() + ": POST /v3/watch: etcd refused a fresh token");
    return end;
  }

  template <typename OnEvent>
  WatchEnd watch_stream_once(const std::string& body, Clock::time_point deadline, OnEvent& on_event) {
    struct Closer {
      Impl& impl;
      ~Closer() { impl.close(impl.watch); }
    } closer{*this};
    try {
      open(watch, deadline);
    } catch (const StoreError&) {
      // The wait's own deadline cut the connect short: that is a timeout, not a failure.
      if (interrupted || Clock::now() < deadline) throw;
      return WatchEnd::TimedOut;
    }
    try {
      const auto reply_deadline = std::min(deadline, deadline_after(options.timeout));
      send_post(watch, "/v3/watch", body, reply_deadline);
      Response r;
      auto& parser = r.parser;
      if (!read_until(watch, r, reply_deadline, [&] { return parser.is_header_done(); })) {
        if (Clock::now() >= deadline) return WatchEnd::TimedOut;
        throw IoError("no reply within " + std::to_string(options.timeout.count()) + " ms");
      }
      const int status = static_cast<int>(parser.get().result_int());
      if (status != 200 || !parser.chunked()) {
        std::string error_body;
        if (read_until(watch, r, reply_deadline, [&] { return parser.is_done(); })) error_body = parser.get().body();
        const auto json = parse_json(error_body, k_max_body);
        throw_if_denied("etcd at " + where() + ": POST /v3/watch: ", Reply{status, error_body}, json);
        throw IoError(describe_error(status, json, error_body));
      }
      // The stream as a whole is unbounded; each message is bounded instead. Its chunks go to
      // `stream` as they arrive, and each chunk read in full is parsed at once.
      std::string stream;  // bytes of the stream not parsed yet
      bool chunk_read = false;
      auto on_chunk_body = [&](std::uint64_t remain, boost::beast::string_view bytes, boost::beast::error_code& ec) {
        if (stream.size() + remain > k_max_body) {
          r.why = "watch message over " + std::to_string(k_max_body) + " bytes";
          ec = http::error::body_limit;
          return std::size_t{0};
        }
        stream.append(bytes.data(), bytes.size());
        chunk_read = remain == bytes.size();
        return bytes.size();
      };
      parser.body_limit(boost::none);
      parser.on_chunk_body(on_chunk_body);  // kept by reference
      for (;;) {
        for (;;) {
          auto message = parse_json_prefix(stream, k_max_body);
          if (message.status == JsonScan::NeedMore) break;
          if (message.status == JsonScan::Malformed) {
            throw IoError("malformed message '" + printable(stream, 120) + "'");
          }
          stream.erase(0, message.used);
          if (etcd::parse_error(message.value)) {
            throw IoError(describe_error(status, std::optional(std::move(message.value)), {}));
          }
          const JsonValue* result = etcd::stream_result(message.value);
          auto response = result ? etcd::parse_watch_response(*result) : std::nullopt;
          if (!response) throw IoError("malformed message");
          if (response->canceled) {
            // The revision to start from was compacted away: read the keys again.
            if (response->compact_revision > 0) return WatchEnd::Compacted;
            if (authenticating() && rankrun::rendezvous::token_refused(response->cancel_reason))
              return WatchEnd::AuthExpired;
            if (contains(response->cancel_reason, "PermissionDenied") || denial(response->cancel_reason)) {
              deny("etcd at " + where() + ": POST /v3/watch: ", response->cancel_reason);
            }
            throw IoError("etcd cancelled the watch: " + printable(response->cancel_reason));
          }
          for (const auto& event : response->events) {
            if (on_event(event)) return WatchEnd::Seen;
          }
        }
        chunk_read = false;
        if (!read_until(watch, r, deadline, [&] { return chunk_read || parser.is_done(); })) return WatchEnd::TimedOut;
        if (parser.is_done()) throw IoError("etcd ended the watch stream");
      }
    } catch (const IoError& e) {
      throw StoreError("etcd at " + where() + ": POST /v3/watch: " + e.what());
    }
  }

  // Watches `targets` (full key -> the revision it was read at) from the next revision on,
  // until every one has an event of the kind `filter` keeps, or `deadline`.
  WatchEnd watch_keys(const std::map<std::string, std::int64_t>& targets, etcd::WatchFilter filter,
                      Clock::time_point deadline) {
    std::string body;
    std::set<std::string> waiting;
    for (const auto& [key, revision] : targets) {
      body += etcd::watch_create_request(key, revision + 1, filter);
      waiting.insert(key);
    }
    return watch_stream(body, deadline, [&](const etcd::WatchEvent& event) {
      const bool wanted = filter == etcd::WatchFilter::All ||
                          (filter == etcd::WatchFilter::PutsOnly) == (event.type == etcd::WatchEvent::Type::Put);
      if (wanted) waiting.erase(event.kv.key);
      return waiting.empty();
    });
  }

  bool wait(const std::vector<std::string>& keys, milliseconds timeout) {
    const auto deadline = deadline_after(timeout);
    std::vector<std::string> full_keys;
    full_keys.reserve(keys.size());
    for (const auto& key : keys) full_keys.push_back(full(key));
    for (;;) {
      const auto presence = read_keys(full_keys, true);
      std::map<std::string, std::int64_t> missing;
      for (std::size_t i = 0; i < full_keys.size(); ++i) {
        if (!presence.kvs[i]) missing.emplace(full_keys[i], presence.revisions[i]);
      }
      if (missing.empty()) return true;
      if (Clock::now() >= deadline) return false;
      switch (watch_keys(missing, etcd::WatchFilter::PutsOnly, deadline)) {
        case WatchEnd::Seen: return true;
        case WatchEnd::TimedOut:
        case WatchEnd::AuthExpired: return false;  // not from watch_stream(), which renews the token
        case WatchEnd::Compacted: break;
      }
    }
  }

  bool wait_deleted(std::string_view key, milliseconds timeout) {
    const auto deadline = deadline_after(timeout);
    const auto full_key = full(key);
    for (;;) {
      const auto found = range(full_key, true);
      if (found.kvs.empty()) return true;
      if (Clock::now() >= deadline) return false;
      switch (watch_keys({{full_key, found.revision}}, etcd::WatchFilter::DeletesOnly, deadline)) {
        case WatchEnd::Seen: return true;
        case WatchEnd::TimedOut:
        case WatchEnd::AuthExpired: return false;  // not from watch_stream(), which renews the token
        case WatchEnd::Compacted: break;
      }
    }
  }

  [[noreturn]] void timed_out(milliseconds timeout, const std::vector<std::string>& keys) const {
    throw StoreTimeout("etcd at " + where() + ": timed out after " + std::to_string(timeout.count()) +
                       " ms waiting for " + describe_keys(keys));
  }
};

EtcdClient::EtcdClient(std::string host, std::uint16_t port, std::string prefix, EtcdOptions options)
    : m_impl(std::make_unique<Impl>(std::move(host), port, std::move(prefix), std::move(options))) {
  m_impl->open(m_impl->main, std::chrono::steady_clock::time_point::max());
  if (m_impl->security) m_impl->prove();
}

EtcdClient::~EtcdClient() = default;
EtcdClient::EtcdClient(EtcdClient&&) noexcept = default;
EtcdClient& EtcdClient::operator=(EtcdClient&&) noexcept = default;

void EtcdClient::set(std::string_view key, std::string_view value) { set(key, value, 0); }

void EtcdClient::set(std::string_view key, std::string_view value, std::int64_t lease) {
  m_impl->call("/v3/kv/put", etcd::put_request(m_impl->full(key), value, lease));
}

void EtcdClient::set_many(const std::vector<std::pair<std::string, std::string>>& kvs) {
  // etcd refuses requests over --max-request-bytes (1.5 MiB by default; base64 adds a third).
  constexpr std::size_t k_max_batch_bytes = std::size_t{512} << 10;
  std::vector<std::pair<std::string, std::string>> batch;
  std::size_t bytes = 0;
  const auto flush = [&] {
    if (batch.empty()) return;
    const auto result = m_impl->txn(etcd::txn_put_request(batch));
    if (!result.succeeded || result.responses.size() != batch.size()) m_impl->malformed("/v3/kv/txn");
    batch.clear();
    bytes = 0;
  };
  for (const auto& [key, value] : kvs) {
    const auto size = m_impl->full(key).size() + value.size();
    if (!batch.empty() && (batch.size() == etcd::k_max_txn_ops || bytes + size > k_max_batch_bytes)) flush();
    batch.emplace_back(m_impl->full(key), value);
    bytes += size;
  }
  flush();
}

std::optional<std::string> EtcdClient::try_get(std::string_view key) {
  auto found = m_impl->range(m_impl->full(key), false);
  if (found.kvs.empty()) return std::nullopt;
  return std::move(found.kvs[0].value);
}

std::string EtcdClient::get(std::string_view key) { return get(key, m_impl->options.timeout); }

std::string EtcdClient::get(std::string_view key, std::chrono::milliseconds timeout) {
  const auto deadline = deadline_after(timeout);
  for (;;) {
    if (auto value = try_get(key)) return std::move(*value);
    // Deleted again between the wait and the read: wait again, within the same deadline.
    if (!m_impl->wait({std::string(key)}, milliseconds(remaining_ms(deadline)))) {
      m_impl->timed_out(timeout, {std::string(key)});
    }
  }
}

std::string EtcdClient::compare_set(std::string_view key, std::string_view expected, std::string_view desired) {
  const auto result = m_impl->txn(etcd::compare_set_request(m_impl->full(key), expected, desired));
  auto stored = etcd::compare_set_result(result, expected, desired);
  if (!stored) m_impl->malformed("/v3/kv/txn");
  return std::move(*stored);
}

std::int64_t EtcdClient::add(std::string_view key, std::int64_t delta) {
  std::int64_t sum = 0;
  m_impl->read_modify_write(key, "add", [&](const std::optional<std::string>& current) {
    std::int64_t base = 0;
    if (current) {
      const auto parsed = parse_stored_integer(*current);
      if (!parsed) {
        throw StoreError("etcd at " + m_impl->where() + ": add on key " + quote_key(key) + " whose value " +
                         quote_key(*current) + " is not a number");
      }
      base = *parsed;
    }
    // Wraps on overflow, as the store's ADD does.
    sum = static_cast<std::int64_t>(static_cast<std::uint64_t>(base) + static_cast<std::uint64_t>(delta));
    return std::to_string(sum);
  });
  return sum;
}

void EtcdClient::append(std::string_view key, std::string_view value) {
  m_impl->read_modify_write(key, "append", [&](const std::optional<std::string>& current) {
    return current ? *current + std::string(value) : std::string(value);
  });
}

bool EtcdClient::check(const std::vector<std::string>& keys) {
  std::vector<std::string> full_keys;
  for (const auto& key : keys) full_keys.push_back(m_impl->full(key));
  const auto presence = m_impl->read_keys(full_keys, true);
  return std::all_of(presence.kvs.begin(), presence.kvs.end(), [](const auto& kv) { return kv.has_value(); });
}

std::vector<std::string> EtcdClient::multi_get(const std::vector<std::string>& keys) {
  const auto timeout = m_impl->options.timeout;
  const auto deadline = deadline_after(timeout);
  std::vector<std::string> full_keys;
  for (const auto& key : keys) full_keys.push_back(m_impl->full(key));
  for (;;) {
    auto presence = m_impl->read_keys(full_keys, false);
    if (std::all_of(presence.kvs.begin(), presence.kvs.end(), [](const auto& kv) { return kv.has_value(); })) {
      std::vector<std::string> values;
      values.reserve(keys.size());
      for (auto& kv : presence.kvs) values.push_back(std::move(kv->value));
      return values;
    }
    if (!m_impl->wait(keys, milliseconds(remaining_ms(deadline)))) m_impl->timed_out(timeout, keys);
  }
}

bool EtcdClient::delete_key(std::string_view key) {
  const auto json = m_impl->call("/v3/kv/deleterange", etcd::delete_request(m_impl->full(key)));
  const auto deleted = etcd::parse_delete_response(json);
  if (!deleted) m_impl->malformed("/v3/kv/deleterange");
  return *deleted > 0;
}

bool EtcdClient::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  return m_impl->wait(keys, timeout);
}

bool EtcdClient::wait_deleted(std::string_view key, std::chrono::milliseconds timeout) {
  return m_impl->wait_deleted(key, timeout);
}

bool EtcdClient::create(std::string_view key, std::string_view value, std::int64_t lease) {
  const auto result = m_impl->txn(etcd::swap_request(m_impl->full(key), 0, value, lease));
  const auto swap = etcd::swap_result(result);
  if (!swap) m_impl->malformed("/v3/kv/txn");
  return swap->succeeded;
}

std::vector<std::pair<std::string, std::string>> EtcdClient::list(std::string_view key_prefix, std::int64_t& revision) {
  const auto full_prefix = m_impl->full(key_prefix);
  const auto json = m_impl->call("/v3/kv/range", etcd::range_request(full_prefix, etcd::prefix_end(full_prefix)));
  auto result = etcd::parse_range_response(json);
  if (!result) m_impl->malformed("/v3/kv/range");
  std::vector<std::pair<std::string, std::string>> out;
  for (auto& kv : result->kvs) {
    if (kv.key.compare(0, m_impl->prefix.size(), m_impl->prefix) != 0)
      m_impl->malformed("/v3/kv/range", "a key out of range");
    out.emplace_back(kv.key.substr(m_impl->prefix.size()), std::move(kv.value));
  }
  revision = result->revision;
  return out;
}

bool EtcdClient::watch_prefix(std::string_view key_prefix, std::int64_t& revision, std::chrono::milliseconds timeout,
                              const std::function<bool(const EtcdEvent&)>& on_event) {
  const auto full_prefix = m_impl->full(key_prefix);
  const auto body =
      etcd::watch_create_request(full_prefix, revision + 1, etcd::WatchFilter::All, etcd::prefix_end(full_prefix));
  const auto& prefix = m_impl->prefix;
  const auto end = m_impl->watch_stream(body, deadline_after(timeout), [&](const etcd::WatchEvent& e) {
    if (e.kv.key.compare(0, prefix.size(), prefix) != 0) return false;
    EtcdEvent event;
    event.deleted = e.type == etcd::WatchEvent::Type::Delete;
    event.key = e.kv.key.substr(prefix.size());
    if (!event.deleted) event.value = e.kv.value;
    event.revision = e.kv.mod_revision;
    revision = std::max(revision, event.revision);
    return !on_event(event);
  });
  if (end == WatchEnd::Compacted) {
    throw StoreError("etcd at " + m_impl->where() + ": revision " + std::to_string(revision + 1) +
                     " of the watched keys was compacted away");
  }
  return end == WatchEnd::Seen;
}

std::int64_t EtcdClient::grant_lease(std::chrono::seconds ttl) {
  const auto json = m_impl->call("/v3/lease/grant", etcd::lease_grant_request(ttl.count()));
  const auto lease = etcd::parse_lease_response(json);
  if (!lease) m_impl->malformed("/v3/lease/grant");
  if (!lease->error.empty()) throw StoreError("etcd at " + m_impl->where() + ": lease grant failed: " + lease->error);
  if (lease->id == 0) m_impl->malformed("/v3/lease/grant", "no lease id");
  return lease->id;
}

void EtcdClient::keep_alive(std::int64_t lease) {
  // A stream endpoint: the one refresh answers with one {"result":...} message, and the stream
  // ends because our request body (the client's half of the stream) has ended.
  const auto json = m_impl->call("/v3/lease/keepalive", etcd::lease_request(lease));
  const JsonValue* result = etcd::stream_result(json);
  const auto refreshed = result ? etcd::parse_lease_response(*result) : std::nullopt;
  if (!refreshed) m_impl->malformed("/v3/lease/keepalive");
  // etcd answers an unknown lease with TTL 0 (left out), not with an error.
  if (refreshed->ttl <= 0) {
    throw StoreError("etcd at " + m_impl->where() + ": lease " + std::to_string(lease) + " has lapsed or was revoked");
  }
}

void EtcdClient::revoke(std::int64_t lease) {
  const auto reply = m_impl->exchange("/v3/lease/revoke", etcd::lease_request(lease));
  if (reply.status == 200) return;
  const auto json = parse_json(reply.body, k_max_body);
  if (json) {
    // gRPC NOT_FOUND: the lease lapsed already, which is what revoking wanted.
    if (const auto error = etcd::parse_error(*json); error && error->code == 5) return;
  }
  m_impl->refused("/v3/lease/revoke", reply, json);
}

const std::string& EtcdClient::host() const { return m_impl->host; }
std::uint16_t EtcdClient::port() const { return m_impl->port; }
const std::string& EtcdClient::prefix() const { return m_impl->prefix; }

void EtcdClient::interrupt() { m_impl->interrupt(); }

std::string EtcdClient::local_address() {
  m_impl->ensure_fresh();
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (::getsockname(m_impl->main.fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    m_impl->fail(m_impl->main, std::string("getsockname failed: ") + errno_text(errno));
  }
  char text[NI_MAXHOST] = {};
  if (::getnameinfo(reinterpret_cast<sockaddr*>(&addr), len, text, sizeof(text), nullptr, 0, NI_NUMERICHOST) != 0) {
    m_impl->fail(m_impl->main, "getnameinfo failed on the local address");
  }
  std::string out = text;
  // An IPv4 connection of a dual-stack socket shows up as ::ffff:a.b.c.d.
  if (out.rfind("::ffff:", 0) == 0 && out.find('.') != std::string::npos) out = out.substr(7);
  return out;
}

}  // namespace rankrun::rendezvous
