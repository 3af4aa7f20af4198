#pragma once
// One accepted client socket: reads into a buffer, cuts it into requests with the pure codec,
// hands each to its host (the server), and writes replies back. Never blocks: a client that
// sends half a frame just leaves bytes in this buffer.

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "rendezvous/messages.hpp"
#include "rendezvous/store_state.hpp"
#include "rendezvous/wire.hpp"

namespace rankrun::rendezvous {

class StoreConnection;
/// The server's record of one key space (store_server_impl.hpp); a connection points at the one
/// it belongs to, so that serving a request needs no lookup.
struct KeySpace;

/// What a connection needs from the server that owns it. Called on the io_context thread.
class ConnectionHost {
 public:
  virtual void on_connection_request(StoreConnection& connection, const Request& request) = 0;
  /// The connection closed (by the peer, an error, or malformed input); called once.
  virtual void on_connection_closed(StoreConnection& connection) = 0;

 protected:
  virtual ~ConnectionHost() = default;
};

class StoreConnection : public std::enable_shared_from_this<StoreConnection> {
 public:
  /// `socket` as accepted, with its peer's address and the listener's port.
  StoreConnection(boost::asio::ip::tcp::socket socket, const boost::asio::ip::tcp::endpoint& peer,
                  std::uint16_t local_port, ConnectionId id, ConnectionHost& host, ProtocolChoice protocol,
                  const Limits& limits);

  /// Starts the read loop.
  void start();

  /// Queues `bytes` for the client. Within a read batch the write starts when the batch ends,
  /// so that several replies go out in one send.
  void deliver(std::string_view bytes);

  /// Closes the socket; the host hears about it once (unless `notify_host` is false, used when
  /// the host itself is going away). `reason` is logged when not empty.
  void close(std::string_view reason, bool notify_host = true);
  /// Sends `last` (a refusal), reads nothing more, and closes once it is written.
  void finish(std::string_view last);

  bool is_open() const { return m_open; }
  /// The peer has sent something: a read took bytes, or bytes wait in the socket for the next.
  bool has_spoken() const {
    if (m_in_size > 0 || m_generation) return true;
    boost::system::error_code ec;
    return m_socket.available(ec) > 0 && !ec;
  }
  /// Memory the connection's buffers hold (their capacity, and the last request's keys and
  /// values), for the server's buffered_bytes().
  std::size_t buffered_bytes() const {
    return m_in.capacity() + m_out.capacity() + m_sending.capacity() + request_bytes(m_request);
  }
  ConnectionId id() const { return m_id; }
  const std::string& peer_ip() const { return m_peer_ip; }
  std::uint16_t peer_port() const { return m_peer_port; }
  std::uint16_t local_port() const { return m_local_port; }

  /// The key space this connection belongs to; set and read by the server only.
  KeySpace* key_space() const { return m_key_space; }
  void set_key_space(KeySpace* space) { m_key_space = space; }
  /// True until the connection's first request that touches keys: until then a SET of
  /// k_key_space_key may still move it to another key space.
  bool may_choose_key_space() const { return m_may_choose_key_space; }
  void stop_choosing_key_space() { m_may_choose_key_space = false; }

 private:
  /// Heap memory `request` keeps for the next one: its vectors and its long strings.
  static std::size_t request_bytes(const Request& request);
  void do_read();
  void on_read(std::size_t bytes_read);
  void process_buffer();
  void do_write();
  void watch_partial_frame();
  bool output_full() const;

  boost::asio::ip::tcp::socket m_socket;
  boost::asio::steady_timer m_frame_timer;  // armed while a partial request waits for the rest
  bool m_frame_timer_armed = false;
  ConnectionId m_id;
  ConnectionHost* m_host;
  ProtocolChoice m_protocol;
  Limits m_limits;
  std::optional<Generation> m_generation;
  std::string m_peer_ip;
  std::uint16_t m_peer_port = 0;
  std::uint16_t m_local_port = 0;

  std::string m_in;  // unparsed bytes; a read appends at m_in_size
  std::size_t m_in_size = 0;
  Request m_request;      // reused for every request
  std::string m_out;      // queued, not yet handed to the socket
  std::string m_sending;  // owned by the write in flight
  bool m_writing = false;
  bool m_reading = false;
  bool m_in_batch = false;
  bool m_open = true;
  bool m_finishing = false;  // finish(): closes once the output is written
  bool m_may_choose_key_space = true;
  KeySpace* m_key_space = nullptr;
};

}  // namespace rankrun::rendezvous
