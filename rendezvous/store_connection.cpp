#include "rendezvous/store_connection.hpp"

#include <algorithm>
#include <cstring>

#include <boost/asio/write.hpp>
#include <spdlog/spdlog.h>

namespace rankrun::rendezvous {
namespace {

// Idle connections are the common case (thousands of ranks waiting on a barrier), so the read
// buffer starts small and doubles only while a large frame is arriving; between requests a
// connection keeps at most a few KiB of buffers, whatever it was sent or asked for before (every
// node of a big job reads the node map, N records, then idles on its connection: kept buffers
// made the store host's memory grow with N^2).
constexpr std::size_t k_initial_buffer = 1024;
constexpr std::size_t k_min_read = 256;
constexpr std::size_t k_keep_buffer = 4 * 1024;
constexpr std::size_t k_keep_output = 4 * 1024;
// A client that keeps sending without reading its replies is not served (nor read) past this
// much queued output, so it cannot make the server buffer without bound: requests already read
// wait in the input buffer until the output drains (one read holds a hundred GETs, each of
// which may ask for a 64 MB value).
constexpr std::size_t k_max_queued_output = 4 * 1024 * 1024;
// The request decoded last is reused for the next one; past this much heap memory (a MULTI_GET
// of the node map's N keys, a large value) the next one starts afresh.
constexpr std::size_t k_keep_request = 4 * 1024;

}  // namespace

std::size_t StoreConnection::request_bytes(const Request& request) {
  static const std::size_t inline_capacity = std::string().capacity();
  std::size_t total = (request.keys.capacity() + request.values.capacity()) * sizeof(std::string);
  for (const auto* strings : {&request.keys, &request.values}) {
    for (const auto& s : *strings) {
      if (s.capacity() > inline_capacity) total += s.capacity() + 1;
    }
  }
  return total;
}

StoreConnection::StoreConnection(boost::asio::ip::tcp::socket socket, const boost::asio::ip::tcp::endpoint& peer,
                                 std::uint16_t local_port, ConnectionId id, ConnectionHost& host,
                                 ProtocolChoice protocol, const Limits& limits)
    : m_socket(std::move(socket)),
      m_frame_timer(m_socket.get_executor()),
      m_id(id),
      m_host(&host),
      m_protocol(protocol),
      m_limits(limits),
      m_peer_ip(peer.address().to_string()),
      m_peer_port(peer.port()),
      m_local_port(local_port) {}

void StoreConnection::start() { do_read(); }

bool StoreConnection::output_full() const { return m_out.size() + m_sending.size() > k_max_queued_output; }

void StoreConnection::do_read() {
  if (!m_open || m_reading || m_finishing) return;
  if (output_full()) return;  // resumed by do_write
  m_reading = true;
  if (m_in.size() - m_in_size < k_min_read) m_in.resize(std::max(k_initial_buffer, m_in.size() * 2));
  m_socket.async_read_some(boost::asio::buffer(m_in.data() + m_in_size, m_in.size() - m_in_size),
                           [self = shared_from_this()](const boost::system::error_code& ec, std::size_t n) {
                             self->m_reading = false;
                             if (!self->m_open) return;
                             if (ec) {
                               // EOF and resets are how clients say goodbye: not worth a warning.
                               const bool quiet = ec == boost::asio::error::eof ||
                                                  ec == boost::asio::error::connection_reset ||
                                                  ec == boost::asio::error::operation_aborted;
                               self->close(quiet ? std::string_view() : std::string_view(ec.message()));
                               return;
                             }
                             self->on_read(n);
                           });
}

void StoreConnection::on_read(std::size_t bytes_read) {
  m_in_size += bytes_read;
  process_buffer();
  if (!m_open) return;
  do_read();
}

void StoreConnection::process_buffer() {
  auto self = shared_from_this();  // the host may drop its reference while we are in here
  m_in_batch = true;
  std::size_t consumed = 0;
  while (m_open && !m_finishing && !output_full()) {
    const std::string_view pending(m_in.data() + consumed, m_in_size - consumed);
    if (pending.empty()) break;
    if (!m_generation) {
      m_generation = detect_generation(pending, m_protocol);
      if (!m_generation) break;
    }
    const DecodeResult result = decode_request(pending, *m_generation, m_limits, m_request);
    if (result.status == DecodeStatus::NeedMore) break;
    if (result.status == DecodeStatus::Malformed) {
      close("malformed request (protocol " + std::string(to_string(*m_generation)) + "): " + result.error);
      break;
    }
    consumed += result.used;
    m_host->on_connection_request(*this, m_request);
  }
  m_in_batch = false;
  if (!m_open) return;
  // Keep only the unparsed tail; a partial frame waits here for the rest.
  if (consumed > 0) {
    std::memmove(m_in.data(), m_in.data() + consumed, m_in_size - consumed);
    m_in_size -= consumed;
  }
  // Give back the memory of a large frame once it is done, and of a large request.
  if (m_in_size == 0 && m_in.size() > k_keep_buffer) std::string().swap(m_in);
  if (request_bytes(m_request) > k_keep_request) m_request = Request();
  // Requests held back for queued output are not a partial frame: the client is slow to read.
  if (!output_full()) watch_partial_frame();
  do_write();
}

void StoreConnection::watch_partial_frame() {
  if (m_in_size == 0) {
    if (m_frame_timer_armed) m_frame_timer.cancel();
    m_frame_timer_armed = false;
    return;
  }
  if (m_frame_timer_armed || m_limits.frame_deadline_ms == 0) return;
  m_frame_timer_armed = true;
  m_frame_timer.expires_after(std::chrono::milliseconds(m_limits.frame_deadline_ms));
  m_frame_timer.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
    if (ec || !self->m_open || !self->m_frame_timer_armed) return;
    self->close("no whole request " + std::to_string(self->m_limits.frame_deadline_ms / 1000) +
                " s after its first byte (" + std::to_string(self->m_in_size) + " bytes so far)");
  });
}

void StoreConnection::deliver(std::string_view bytes) {
  if (!m_open || bytes.empty()) return;
  m_out.append(bytes);
  if (!m_in_batch) do_write();
}

void StoreConnection::finish(std::string_view last) {
  if (!m_open) return;
  m_finishing = true;
  m_out.append(last);
  if (!m_in_batch) do_write();
}

void StoreConnection::do_write() {
  if (!m_open || m_writing) return;
  if (m_out.empty()) {
    if (m_finishing) close({});
    return;
  }
  m_writing = true;
  m_sending.swap(m_out);
  boost::asio::async_write(
      m_socket, boost::asio::buffer(m_sending),
      [self = shared_from_this()](const boost::system::error_code& ec, std::size_t) {
        self->m_writing = false;
        if (!self->m_open) return;
        if (ec) {
          self->close(ec == boost::asio::error::broken_pipe || ec == boost::asio::error::connection_reset
                          ? std::string_view()
                          : std::string_view(ec.message()));
          return;
        }
        // Give back the memory of a large reply once it is sent.
        if (self->m_sending.capacity() > k_keep_output) {
          std::string().swap(self->m_sending);
        } else {
          self->m_sending.clear();
        }
        self->do_write();
        // In case it was paused for queued output: the requests already
        // read first, then the socket.
        if (self->m_in_size > 0 && !self->output_full()) self->process_buffer();
        if (self->m_open) self->do_read();
      });
}

void StoreConnection::close(std::string_view reason, bool notify_host) {
  if (!m_open) return;
  m_open = false;
  m_frame_timer.cancel();
  if (!reason.empty()) {
    spdlog::warn("store: closing connection {} from {}:{}: {}", m_id, m_peer_ip, m_peer_port, reason);
  }
  boost::system::error_code ec;
  m_socket.shutdown(boost::asio::ip::tcp::socket::shutdown_both, ec);
  m_socket.close(ec);
  ConnectionHost* host = m_host;
  m_host = nullptr;
  if (notify_host && host != nullptr) host->on_connection_closed(*this);
}

}  // namespace rankrun::rendezvous
