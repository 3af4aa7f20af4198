#pragma once
// The torch-compatible TCPStore server, on the caller's io_context (single-threaded: every
// callback below runs on the thread that runs that io_context).
//
// Unlike torch's servers it binds only the address it is given (127.0.0.1 by default; "0.0.0.0"
// or "::" for every interface), never lets one slow or half-sent client stall the others, and
// closes only the offending connection on malformed or oversized input, with a log line.

#include <boost/asio/io_context.hpp>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>

#include "rendezvous/messages.hpp"
#include "rendezvous/store_state.hpp"
#include "rendezvous/wire.hpp"

namespace rankrun::rendezvous {

/// Lets the launcher watch store traffic (which worker connected, who ADDed "init/"...).
/// Callbacks run on the io_context thread, must not throw, and may call StoreServer::reset()
/// or stop() (the connection being served is then closed and its request dropped).
struct StoreObserver {
  virtual ~StoreObserver() = default;
  /// A client connected. `conn` is unique for the server's lifetime. With `peer_ip`/`peer_port`
  /// and the server's address, port_owner.hpp's pid_of_tcp_socket() finds the client process.
  virtual void on_open(std::uint64_t conn, const std::string& peer_ip, std::uint16_t peer_port,
                       std::uint16_t local_port) {
    (void)conn, (void)peer_ip, (void)peer_port, (void)local_port;
  }
  /// The connection closed, whoever closed it (including reset() and stop()).
  virtual void on_close(std::uint64_t conn) { (void)conn; }
  /// A complete request arrived and is about to be applied; `first_key` is empty for ops
  /// without keys. Not called for VALIDATE.
  virtual void on_request(std::uint64_t conn, Op op, std::string_view first_key) {
    (void)conn, (void)op, (void)first_key;
  }
};

struct ServerOptions {
  /// Numeric address or host name; "0.0.0.0" / "::" listen on every interface ("::" dual-stack).
  std::string bind_address = "127.0.0.1";
  /// 0: the kernel picks one; port() tells which.
  std::uint16_t port = 0;
  /// Protocol table for connections that do not open with VALIDATE.
  ProtocolChoice protocol = ProtocolChoice::Auto;
  Limits limits;
};

/// The server could not listen. The message names the address, the process holding the port
/// when it can be found, and what to do.
struct StoreBindError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class StoreServer {
 public:
  /// Binds and listens at once (throws StoreBindError); serving starts when `io` runs.
  StoreServer(boost::asio::io_context& io, ServerOptions options, StoreObserver* observer = nullptr);
  /// stop()s.
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  /// The bound port (the kernel's choice when options.port was 0).
  std::uint16_t port() const;
  /// The address actually bound, as text ("127.0.0.1").
  const std::string& address() const;

  /// A fresh key space: drops every key, queue and wait, and closes every connection (each one
  /// reported through on_close). Keeps listening on the same port.
  void reset();
  /// Stops listening and closes every connection. Idempotent; the destructor calls it.
  void stop();

  std::size_t connection_count() const;
  /// Read access to the keys (e.g. to see which ranks have arrived).
  const StoreState& state() const;

 private:
  class Impl;
  std::shared_ptr<Impl> m_impl;
};

}  // namespace rankrun::rendezvous
