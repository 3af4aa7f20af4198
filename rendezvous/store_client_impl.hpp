#pragma once
// StoreClient's insides, shared by the files that implement it, one concern each (as the
// server's are):
//   store_client_socket.cpp     the connection: connecting with retries, the socket's timeouts,
//                               sending and receiving bytes, interrupt(), its own address
//   store_client_handshake.cpp  the handshake after each connect: VALIDATE and PING, the key
//                               space's HELLO, the job secret's credential and proofs
//   store_client.cpp            the store's operations (the public calls) and WAIT's cancel race

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "rendezvous/messages.hpp"
#include "rendezvous/store_client.hpp"
#include "rendezvous/tcp_connection.hpp"
#include "rendezvous/wire.hpp"

namespace rankrun::rendezvous {

struct StoreClient::Impl {
  using Clock = tcp::Clock;
  using milliseconds = std::chrono::milliseconds;

  std::string host;
  std::uint16_t port;
  ClientOptions options;
  Generation generation;
  int fd = -1;
  milliseconds io_timeout{0};
  std::string out;  // the request being written
  Request request;  // make()'s, reused
  // interrupt() may come from another thread: it and every change of `fd` hold this mutex.
  std::mutex fd_mutex;
  std::minstd_rand rng{std::random_device{}()};  // PING nonces
  std::atomic<bool> interrupted{false};
  bool not_a_store = false;  // the last handshake got an answer no store gives
  // What made the last handshake fail (when it did not end in not_a_store or a refusal).
  StoreFailure handshake_failure = StoreFailure::Failed;

  Impl(std::string host, std::uint16_t port, ClientOptions options);
  ~Impl() { disconnect(); }

  std::string where() const { return tcp::endpoint_name(host, port); }

  // --- the connection (store_client_socket.cpp) ---------------------------------------------

  void connect();
  void ensure_connected();
  // One attempt over every resolved address; empty string on success, else why it failed.
  std::string connect_once(Clock::time_point deadline);
  bool cancelled() const;
  void disconnect();
  void interrupt();
  // Any failure mid-request leaves the stream in an unknown state: drop the connection (the
  // next call reconnects) and report.
  [[noreturn]] void fail(const std::string& what, StoreFailure kind = StoreFailure::Failed);

  void set_io_timeout(milliseconds timeout);
  // Raw I/O, bounded by io_timeout; these throw StoreError without dropping the connection.
  void send_all(std::string_view bytes);
  void recv_exact(char* dest, std::size_t size);
  // Before a read: waits for the reply's bytes past io_timeout, up to options.patience, while the
  // server has all that was sent (ClientOptions::patience).
  void await_reply();
  // Request/reply helpers that drop the connection on any failure.
  void send_request(const Request& r);
  void read_reply(char* dest, std::size_t size, std::string_view op);
  std::uint8_t read_u8(std::string_view op);
  std::int64_t read_int(std::string_view op);
  std::string read_value(std::string_view op);

  // --- the handshake (store_client_handshake.cpp) -------------------------------------------

  // 2.2+: VALIDATE then PING, as torch >= 2.5 does; the echoed nonce proves the server speaks
  // the same table (a torch <= 2.1 server would read our bytes as something else).
  // With options.key_space, the key-space handshake follows (key_space_auth.hpp): a COMPARE_SET
  // that names the key space and, with a secret, the proofs both ways. Its replies also prove
  // the server took the name: a server that refuses it says so and closes the connection.
  // Empty, or why it failed (not_a_store set when the answer was no store's).
  std::string handshake(Clock::time_point deadline);
  // COMPARE_SET rankrun/key-space: the key space's name and `hello`.
  void append_hello(std::string_view hello);
  // The store's answer to HELLO "credential": the secret, taken with options.take_credential
  // (and kept for reconnects). Empty, or why the server is not rankrun's store.
  std::string fetch_secret();
  // Until the handshake's next reply is there (or the owner cancels).
  void await_handshake_reply(Clock::time_point deadline);
  // A COMPARE_SET's reply in the handshake: small, or the server is not rankrun's store.
  std::optional<std::string> handshake_value();
  // The rest of the key-space handshake, after the COMPARE_SET that named the key space.
  std::string join_key_space(Clock::time_point deadline, const std::string& client_nonce);
  // `server_reason`: the store's words, when it sent a refusal.
  [[noreturn]] void refused(const std::string& why, bool differ, const std::string& server_reason = {});

  // --- the operations' helpers (store_client.cpp) ------------------------------------------

  Request& make(Op op);
  std::string describe_keys(const std::vector<std::string>& keys) const;
  bool wait(const std::vector<std::string>& keys, milliseconds timeout);
  // Sends `r` (WAIT or BARRIER) and waits for its STOP_WAITING until `timeout`; past it, cancels.
  bool await_stop_waiting(const Request& r, milliseconds timeout);
  bool expect_stop_waiting(std::uint8_t reply, const std::string& op);
  void wait_or_throw(const std::vector<std::string>& keys, milliseconds timeout);
};

}  // namespace rankrun::rendezvous
