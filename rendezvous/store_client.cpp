#include "rendezvous/store_client.hpp"

#include <fcntl.h>
#include <netdb.h>  // getnameinfo
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>
#include <utility>

#include "base/socket_address.hpp"
#include "base/text.hpp"
#include "rendezvous/key_space_auth.hpp"
#include "rendezvous/messages.hpp"
#include "rendezvous/tcp_connection.hpp"
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

Generation generation_of(ClientProtocol protocol) {
  switch (protocol) {
    case ClientProtocol::Newest: return Generation::V2_2;
    case ClientProtocol::V2_1: return Generation::V2_1;
    case ClientProtocol::V1_13: return Generation::V1_13;
  }
  return Generation::V2_2;
}

}  // namespace

struct StoreClient::Impl {
  std::string host;
  std::uint16_t port;
  ClientOptions options;
  Generation generation;
  int fd = -1;
  milliseconds io_timeout{0};
  std::string out;
  std::string value;
  Request request;
  // interrupt() may come from another thread: it and every change of `fd` hold this mutex.
  std::mutex fd_mutex;
  std::minstd_rand rng{std::random_device{}()};  // PING nonces
  std::atomic<bool> interrupted{false};
  bool not_a_store = false;  // the last handshake got an answer no store gives

  Impl(std::string h, std::uint16_t p, ClientOptions o)
      : host(std::move(h)), port(p), options(std::move(o)), generation(generation_of(options.protocol)) {}
  ~Impl() { disconnect(); }

  std::string where() const { return tcp::endpoint_name(host, port); }

  void disconnect() {
    const std::lock_guard lock(fd_mutex);
    if (fd >= 0) ::close(fd);
    fd = -1;
  }

  void interrupt() {
    const std::lock_guard lock(fd_mutex);
    interrupted = true;
    if (fd >= 0) ::shutdown(fd, SHUT_RDWR);
  }

  // Any failure mid-request leaves the stream in an unknown state: drop the connection (the
  // next call reconnects) and report.
  [[noreturn]] void fail(const std::string& what) {
    disconnect();
    throw StoreError("store " + where() + ": " + what);
  }

  // One attempt over every resolved address; empty string on success, else why it failed.
  std::string connect_once(Clock::time_point deadline) {
    tcp::ConnectOptions connect;
    connect.user_timeout = options.user_timeout;
    connect.wake_fd = options.cancel_fd;
    const auto connected = tcp::connect_once(host, port, deadline, connect);
    if (connected.woken) throw StoreError("store " + where() + ": interrupted");
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

  // 2.2+: VALIDATE then PING, as torch >= 2.5 does; the echoed nonce proves the server speaks
  // the same table (a torch <= 2.1 server would read our bytes as something else).
  // With options.key_space, the key-space handshake follows (key_space_auth.hpp): a COMPARE_SET
  // that names the key space and, with a secret, the proofs both ways. Its replies also prove
  // the server took the name: a server that refuses it says so and closes the connection.
  std::string handshake(Clock::time_point deadline) {
    const bool choose = !options.key_space.empty();
    if (generation != Generation::V2_2 && !choose) return {};
    out.clear();
    const auto nonce = static_cast<std::uint32_t>(::getpid());
    if (generation == Generation::V2_2) {
      append_u8(out, *wire_type(Op::Validate, generation));
      append_u32(out, k_validation_magic);
      append_u8(out, *wire_type(Op::Ping, generation));
      append_u32(out, nonce);
    }
    std::string client_nonce;
    const bool fetch = choose && !options.job_secret && options.take_credential;
    if (fetch) {
      append_hello(k_hello_credential);
    } else if (choose) {
      if (options.job_secret) client_nonce = options.job_secret->nonce();
      append_hello(make_hello(client_nonce));
    }
    try {
      set_io_timeout(std::min(options.timeout, milliseconds(remaining_ms(deadline))));
      send_all(out);
      await_handshake_reply(deadline);
      if (generation == Generation::V2_2) {
        char reply[4];
        recv_exact(reply, 4);
        if (read_u32(std::string_view(reply, 4)) != nonce) {
          const auto shown = printable(std::string_view(reply, 4), 4, '.');
          not_a_store = true;
          return "it answered the handshake with '" + shown + "...' instead of echoing its PING";
        }
      }
      if (fetch) {
        if (auto why = fetch_secret(); !why.empty()) return why;
        client_nonce = options.job_secret->nonce();
        out.clear();
        append_hello(make_hello(client_nonce));
        send_all(out);
        await_handshake_reply(deadline);
      }
      if (choose) return join_key_space(deadline, client_nonce);
    } catch (const StoreRefused&) {
      throw;
    } catch (const StoreError& e) {
      return std::string("handshake failed") + (choose ? " joining key space '" + options.key_space + "'" : "") + ": " +
             e.what();
    }
    return {};
  }

  // COMPARE_SET rankrun/key-space: the key space's name and `hello`.
  void append_hello(std::string_view hello) {
    append_u8(out, *wire_type(Op::CompareSet, generation));
    append_bytes(out, k_key_space_key);
    append_bytes(out, options.key_space);
    append_bytes(out, hello);
  }

  // The store's answer to HELLO "credential": the secret, taken with options.take_credential
  // (and kept for reconnects). Empty, or why the server is not rankrun's store.
  std::string fetch_secret() {
    using Kind = HandshakeReply::Kind;
    const auto answer = handshake_value();
    const auto reply = answer ? parse_reply(*answer) : HandshakeReply{};
    if (reply.kind == Kind::Refused) {
      refused("refused this connection: " + reply.payload,
              reply.payload == k_refusal_no_secret || reply.payload == k_refusal_no_credential);
    }
    if (reply.kind == Kind::Joined)
      refused("has no job secret, and this end expects one in a credential from it", true);
    if (reply.kind != Kind::Credential) {
      not_a_store = true;
      return "it answered the key-space handshake as rankrun's store does not (a torch store?)";
    }
    std::shared_ptr<const JobSecret> secret;
    try {
      secret = options.take_credential(reply.payload);
    } catch (const std::exception& e) {
      refused(std::string("handed out a job secret this end does not take: ") + e.what(), true);
    }
    if (!secret) refused("handed out a job secret this end does not take", true);
    options.job_secret = std::move(secret);
    return {};
  }

  // Until the handshake's next reply is there (or the owner cancels).
  void await_handshake_reply(Clock::time_point deadline) {
    if (options.cancel_fd < 0) return;
    const auto until = std::min(deadline, deadline_after(options.timeout));
    if (tcp::wait_for(fd, POLLIN, options.cancel_fd, until) == tcp::Wait::Woken) throw StoreError("interrupted");
  }

  // A COMPARE_SET's reply in the handshake: small, or the server is not rankrun's store.
  std::optional<std::string> handshake_value() {
    constexpr std::uint64_t k_max_handshake_value = 4096;
    char length_bytes[8];
    recv_exact(length_bytes, 8);
    const auto length = static_cast<std::uint64_t>(read_i64(std::string_view(length_bytes, 8)));
    if (length > k_max_handshake_value) return std::nullopt;
    std::string bytes(static_cast<std::size_t>(length), '\0');
    if (length > 0) recv_exact(bytes.data(), bytes.size());
    return bytes;
  }

  [[noreturn]] void refused(const std::string& why, bool differ) {
    throw StoreRefused("store " + where() + ": " + why, differ);
  }

  // The rest of the key-space handshake, after the COMPARE_SET that named the key space.
  std::string join_key_space(Clock::time_point deadline, const std::string& client_nonce) {
    using Kind = HandshakeReply::Kind;
    const auto unexpected = [&] {
      not_a_store = true;
      return "it answered the key-space handshake as rankrun's store does not (a torch store?)";
    };
    auto answer = handshake_value();
    if (!answer) return unexpected();
    auto reply = parse_reply(*answer);
    if (reply.kind == Kind::Refused) {
      refused("refused this connection: " + reply.payload,
              reply.payload == k_refusal_no_secret || reply.payload == k_refusal_wrong_secret);
    }
    const JobSecret* secret = options.job_secret.get();
    if (secret == nullptr) {
      if (reply.kind == Kind::Joined) return {};
      if (reply.kind == Kind::Challenge) refused("asks for a proof of a job secret, and this end has none", true);
      return unexpected();
    }
    if (reply.kind == Kind::Joined) refused("has no job secret, and this end has one", true);
    if (reply.kind != Kind::Challenge) return unexpected();
    const std::string server_nonce = reply.payload;
    const auto& name = options.key_space;
    out.clear();
    append_u8(out, *wire_type(Op::CompareSet, generation));
    append_bytes(out, k_key_space_proof_key);
    append_bytes(out, name);
    append_bytes(out, secret->sign(proof_message(ProofDirection::ClientToStore, name, client_nonce, server_nonce)));
    send_all(out);
    await_handshake_reply(deadline);
    answer = handshake_value();
    if (!answer) return unexpected();
    reply = parse_reply(*answer);
    if (reply.kind == Kind::Refused) {
      refused("refused this connection: " + reply.payload, reply.payload == k_refusal_wrong_secret);
    }
    if (reply.kind != Kind::JoinedWithProof) return unexpected();
    if (!secret->verify(proof_message(ProofDirection::StoreToClient, name, client_nonce, server_nonce),
                        reply.payload)) {
      refused("did not prove the job secret (its proof is wrong)", true);
    }
    return {};
  }

  bool cancelled() const {
    if (interrupted) return true;
    if (options.cancel_fd < 0) return false;
    pollfd p{options.cancel_fd, POLLIN, 0};
    return ::poll(&p, 1, 0) > 0;
  }

  void connect() {
    const auto deadline = deadline_after(options.connect_timeout);
    // Faster than torch's 500 ms start: a launcher's store is usually a few milliseconds from
    // being up.
    tcp::Backoff backoff;
    std::string why;
    for (;;) {
      if (cancelled()) throw StoreError("store " + where() + ": interrupted");
      why = connect_once(deadline);
      if (why.empty()) {
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
          throw StoreNotAStore("the server at " + where() + " is not a store: " + why);
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
    throw StoreError("cannot connect to the store at " + where() + " within " +
                     std::to_string(options.connect_timeout.count()) + " ms: " + why);
  }

  void ensure_connected() {
    if (fd < 0) connect();
  }

  void set_io_timeout(milliseconds timeout) {
    // 0 would mean "no timeout" to the kernel.
    const auto ms = std::clamp<long long>(timeout.count(), 1, 100LL * 365 * 24 * 3600 * 1000);
    timeval tv{};
    tv.tv_sec = static_cast<time_t>(ms / 1000);
    tv.tv_usec = static_cast<suseconds_t>((ms % 1000) * 1000);
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    io_timeout = milliseconds(ms);
  }

  // Raw I/O, bounded by the socket timeouts; these throw without dropping the connection.
  void send_all(std::string_view bytes) {
    std::size_t sent = 0;
    while (sent < bytes.size()) {
      const ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (n > 0) {
        sent += static_cast<std::size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        throw StoreError("send timed out after " + std::to_string(io_timeout.count()) + " ms");
      }
      throw StoreError("send failed: " + errno_text(errno));
    }
  }

  void recv_exact(char* dest, std::size_t size) {
    std::size_t got = 0;
    while (got < size) {
      const ssize_t n = ::recv(fd, dest + got, size - got, 0);
      if (n > 0) {
        got += static_cast<std::size_t>(n);
        continue;
      }
      if (n == 0) throw StoreError("connection closed by the server");
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        throw StoreError("no reply within " + std::to_string(io_timeout.count()) + " ms");
      }
      throw StoreError("receive failed: " + errno_text(errno));
    }
  }

  // Request/reply helpers that drop the connection on any failure.
  void send_request(const Request& r) {
    ensure_connected();
    out.clear();
    if (!encode_request(r, generation, out)) {
      throw StoreError("store " + where() + ": " + std::string(op_name(r.op)) + " is not part of protocol " +
                       std::string(to_string(generation)));
    }
    try {
      send_all(out);
    } catch (const StoreError& e) {
      fail(std::string(op_name(r.op)) + ": " + e.what());
    }
  }

  void read_reply(char* dest, std::size_t size, std::string_view op) {
    try {
      recv_exact(dest, size);
    } catch (const StoreError& e) {
      fail(std::string(op) + ": " + e.what());
    }
  }

  std::uint8_t read_u8(std::string_view op) {
    char b = 0;
    read_reply(&b, 1, op);
    return static_cast<std::uint8_t>(b);
  }

  std::int64_t read_int(std::string_view op) {
    char b[8];
    read_reply(b, 8, op);
    return read_i64(std::string_view(b, 8));
  }

  std::string read_value(std::string_view op) {
    const auto length = static_cast<std::uint64_t>(read_int(op));
    if (length > k_max_reply_value) fail(std::string(op) + ": reply of " + std::to_string(length) + " bytes");
    std::string v(static_cast<std::size_t>(length), '\0');
    if (length > 0) read_reply(v.data(), v.size(), op);
    return v;
  }

  Request& make(Op op) {
    request.op = op;
    request.keys.clear();
    request.values.clear();
    request.number = 0;
    return request;
  }

  std::string describe_keys(const std::vector<std::string>& keys) const {
    std::string text;
    for (std::size_t i = 0; i < keys.size() && i < 8; ++i) text += (i ? ", '" : "'") + keys[i] + "'";
    if (keys.size() > 8) text += ", ... (" + std::to_string(keys.size()) + " keys)";
    return text;
  }

  bool wait(const std::vector<std::string>& keys, milliseconds timeout) {
    auto& r = make(Op::Wait);
    r.keys = keys;
    return await_stop_waiting(r, timeout);
  }

  // Sends `r` (WAIT or BARRIER) and waits for its STOP_WAITING until `timeout`; past it, cancels.
  bool await_stop_waiting(const Request& r, milliseconds timeout) {
    const std::string op(op_name(r.op));
    send_request(r);
    const auto deadline = deadline_after(timeout);
    const auto waited = tcp::wait_for(fd, POLLIN, -1, deadline);
    if (waited == tcp::Wait::Failed) fail(op + ": poll failed: " + errno_text(errno));
    const bool ready = waited == tcp::Wait::Ready;
    if (ready) return expect_stop_waiting(read_u8(op), op);
    if (generation == Generation::V1_13) {
      // No CANCEL_WAIT before 2.1: the STOP_WAITING may still come, so this stream is unusable.
      disconnect();
      return false;
    }
    // Cancel, then settle the race where the keys arrived just as we gave up: the server may
    // have sent STOP_WAITING first, and WAIT_CANCELED always follows.
    send_request(make(Op::CancelWait));
    auto reply = read_u8("CANCEL_WAIT");
    if (reply == static_cast<std::uint8_t>(WaitResponse::StopWaiting)) {
      if (read_u8("CANCEL_WAIT") != static_cast<std::uint8_t>(WaitResponse::WaitCanceled)) {
        fail("CANCEL_WAIT: unexpected reply");
      }
      return true;  // every key did arrive
    }
    if (reply != static_cast<std::uint8_t>(WaitResponse::WaitCanceled)) fail("CANCEL_WAIT: unexpected reply");
    return false;
  }

  bool expect_stop_waiting(std::uint8_t reply, const std::string& op) {
    if (reply != static_cast<std::uint8_t>(WaitResponse::StopWaiting)) {
      fail(op + ": unexpected reply " + std::to_string(reply));
    }
    return true;
  }

  void wait_or_throw(const std::vector<std::string>& keys, milliseconds timeout) {
    if (!wait(keys, timeout)) {
      throw StoreTimeout("store " + where() + ": timed out after " + std::to_string(timeout.count()) +
                         " ms waiting for " + describe_keys(keys));
    }
  }
};

StoreClient::StoreClient(std::string host, std::uint16_t port, ClientOptions options)
    : m_impl(std::make_unique<Impl>(std::move(host), port, std::move(options))) {
  const auto& key_space = m_impl->options.key_space;
  if (!key_space.empty() && !is_valid_key_space_name(key_space)) {
    throw StoreError("store " + m_impl->where() + ": key space name '" + key_space.substr(0, 64) + "' is not 1 to " +
                     std::to_string(k_max_key_space_name) + " printable ASCII characters without blanks");
  }
  m_impl->connect();
}

StoreClient::~StoreClient() = default;
StoreClient::StoreClient(StoreClient&&) noexcept = default;
StoreClient& StoreClient::operator=(StoreClient&&) noexcept = default;

void StoreClient::set(std::string_view key, std::string_view value) {
  auto& r = m_impl->make(Op::Set);
  r.keys.emplace_back(key);
  r.values.emplace_back(value);
  m_impl->send_request(r);
}

std::string StoreClient::get(std::string_view key) { return get(key, m_impl->options.timeout); }

std::string StoreClient::get(std::string_view key, std::chrono::milliseconds timeout) {
  // Like torch: WAIT first, so a GET never races the key's creation.
  m_impl->wait_or_throw({std::string(key)}, timeout);
  auto& r = m_impl->make(Op::Get);
  r.keys.emplace_back(key);
  m_impl->send_request(r);
  return m_impl->read_value("GET");
}

std::int64_t StoreClient::add(std::string_view key, std::int64_t delta) {
  auto& r = m_impl->make(Op::Add);
  r.keys.emplace_back(key);
  r.number = delta;
  m_impl->send_request(r);
  return m_impl->read_int("ADD");
}

std::string StoreClient::compare_set(std::string_view key, std::string_view expected, std::string_view desired) {
  auto& r = m_impl->make(Op::CompareSet);
  r.keys.emplace_back(key);
  r.values.emplace_back(expected);
  r.values.emplace_back(desired);
  m_impl->send_request(r);
  return m_impl->read_value("COMPARE_SET");
}

bool StoreClient::check(const std::vector<std::string>& keys) {
  auto& r = m_impl->make(Op::Check);
  r.keys = keys;
  m_impl->send_request(r);
  const auto reply = m_impl->read_u8("CHECK");
  if (reply > 1) m_impl->fail("CHECK: unexpected reply " + std::to_string(reply));
  return reply == static_cast<std::uint8_t>(CheckResponse::Ready);
}

bool StoreClient::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  return m_impl->wait(keys, timeout);
}

bool StoreClient::delete_key(std::string_view key) {
  auto& r = m_impl->make(Op::DeleteKey);
  r.keys.emplace_back(key);
  m_impl->send_request(r);
  return m_impl->read_int("DELETE_KEY") != 0;
}

std::int64_t StoreClient::num_keys() {
  m_impl->send_request(m_impl->make(Op::GetNumKeys));
  return m_impl->read_int("GETNUMKEYS");
}

void StoreClient::append(std::string_view key, std::string_view value) {
  auto& r = m_impl->make(Op::Append);
  r.keys.emplace_back(key);
  r.values.emplace_back(value);
  m_impl->send_request(r);
}

std::vector<std::string> StoreClient::multi_get(const std::vector<std::string>& keys) {
  m_impl->wait_or_throw(keys, m_impl->options.timeout);
  std::vector<std::string> values;
  values.reserve(keys.size());
  if (m_impl->generation == Generation::V1_13) {
    for (const auto& key : keys) {
      auto& r = m_impl->make(Op::Get);
      r.keys.push_back(key);
      m_impl->send_request(r);
      values.push_back(m_impl->read_value("GET"));
    }
    return values;
  }
  auto& r = m_impl->make(Op::MultiGet);
  r.keys = keys;
  m_impl->send_request(r);
  for (std::size_t i = 0; i < keys.size(); ++i) values.push_back(m_impl->read_value("MULTI_GET"));
  return values;
}

void StoreClient::multi_set(const std::vector<std::string>& keys, const std::vector<std::string>& values) {
  if (keys.size() != values.size()) {
    throw StoreError("multi_set: " + std::to_string(keys.size()) + " keys but " + std::to_string(values.size()) +
                     " values");
  }
  if (m_impl->generation == Generation::V1_13) {
    for (std::size_t i = 0; i < keys.size(); ++i) set(keys[i], values[i]);
    return;
  }
  auto& r = m_impl->make(Op::MultiSet);
  r.keys = keys;
  r.values = values;
  m_impl->send_request(r);
}

std::vector<std::string> StoreClient::list_keys() {
  m_impl->send_request(m_impl->make(Op::ListKeys));
  const auto count = m_impl->read_int("LIST_KEYS");
  // rankrun's store lists at most 131072 keys; torch's have no bound, but a count past this
  // means the stream is not what we think.
  constexpr std::int64_t k_max_listed = std::int64_t{1} << 24;
  if (count < 0 || count > k_max_listed) m_impl->fail("LIST_KEYS: a count of " + std::to_string(count) + " keys");
  std::vector<std::string> keys;
  keys.reserve(static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < count; ++i) keys.push_back(m_impl->read_value("LIST_KEYS"));
  return keys;
}

bool StoreClient::barrier(std::string_view key, std::int64_t world_size, std::chrono::milliseconds timeout) {
  auto& r = m_impl->make(Op::Barrier);
  r.keys.emplace_back(key);
  r.number = world_size;
  return m_impl->await_stop_waiting(r, timeout);
}

void StoreClient::queue_push(std::string_view key, std::string_view value) {
  auto& r = m_impl->make(Op::QueuePush);
  r.keys.emplace_back(key);
  r.values.emplace_back(value);
  m_impl->send_request(r);
}

std::optional<std::string> StoreClient::queue_pop(std::string_view key) {
  auto& r = m_impl->make(Op::QueuePop);
  r.keys.emplace_back(key);
  m_impl->send_request(r);
  // The length before the pop, then the item when there was one.
  const auto length = m_impl->read_int("QUEUE_POP");
  if (length < 0) m_impl->fail("QUEUE_POP: a length of " + std::to_string(length));
  if (length == 0) return std::nullopt;
  return m_impl->read_value("QUEUE_POP");
}

std::optional<std::string> StoreClient::queue_pop(std::string_view key, std::chrono::milliseconds timeout) {
  const auto deadline = tcp::deadline_after(timeout);
  const std::vector<std::string> keys{std::string(key)};
  for (;;) {
    const auto left = std::chrono::milliseconds(tcp::remaining_ms(deadline));
    if (!m_impl->wait(keys, left)) return std::nullopt;
    if (auto item = queue_pop(key)) return item;
    if (tcp::Clock::now() >= deadline) return std::nullopt;
  }
}

std::int64_t StoreClient::queue_len(std::string_view key) {
  auto& r = m_impl->make(Op::QueueLen);
  r.keys.emplace_back(key);
  m_impl->send_request(r);
  return m_impl->read_int("QUEUE_LEN");
}

void StoreClient::ping() {
  if (m_impl->generation != Generation::V2_2) {
    (void)num_keys();
    return;
  }
  auto& r = m_impl->make(Op::Ping);
  const auto nonce = static_cast<std::uint32_t>(m_impl->rng());
  r.number = nonce;
  m_impl->send_request(r);
  char b[4];
  m_impl->read_reply(b, 4, "PING");
  if (read_u32(std::string_view(b, 4)) != nonce) m_impl->fail("PING: wrong nonce echoed");
}

const std::string& StoreClient::host() const { return m_impl->host; }
std::uint16_t StoreClient::port() const { return m_impl->port; }

void StoreClient::interrupt() { m_impl->interrupt(); }

std::string StoreClient::local_address() {
  m_impl->ensure_connected();
  std::string why;
  auto address = local_address_of(m_impl->fd, why);
  if (!address) m_impl->fail(why);
  return *address;
}

}  // namespace rankrun::rendezvous
