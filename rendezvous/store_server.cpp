#include "rendezvous/store_server.hpp"

#include <fcntl.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ip/v6_only.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <spdlog/spdlog.h>
#include <unordered_map>
#include <vector>

#include "rendezvous/port_owner.hpp"
#include "rendezvous/store_connection.hpp"

namespace rankrun::rendezvous {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

class StoreServer::Impl : public std::enable_shared_from_this<Impl>, public ConnectionHost {
 public:
  Impl(asio::io_context& io, ServerOptions options, StoreObserver* observer)
      : m_io(io), m_options(std::move(options)), m_observer(observer), m_acceptor(io), m_retry_timer(io),
        m_state(m_options.limits) {}

  void listen();
  void do_accept();
  void reset();
  void stop();

  void on_connection_request(StoreConnection& connection, const Request& request) override;
  void on_connection_closed(StoreConnection& connection) override;

  asio::io_context& m_io;
  ServerOptions m_options;
  StoreObserver* m_observer;
  tcp::acceptor m_acceptor;
  asio::steady_timer m_retry_timer;
  StoreState m_state;
  Effects m_effects;
  std::unordered_map<ConnectionId, std::shared_ptr<StoreConnection>> m_connections;
  ConnectionId m_next_id = 1;
  std::uint16_t m_port = 0;
  std::string m_address;
  bool m_stopped = false;

 private:
  void close_all();
};

namespace {

std::string endpoint_text(const std::string& host, std::uint16_t port) {
  return host.find(':') != std::string::npos ? "[" + host + "]:" + std::to_string(port)
                                             : host + ":" + std::to_string(port);
}

tcp::endpoint resolve_bind_endpoint(asio::io_context& io, const std::string& host, std::uint16_t port) {
  boost::system::error_code ec;
  auto address = asio::ip::make_address(host, ec);
  if (!ec) return {address, port};
  tcp::resolver resolver(io);
  auto results = resolver.resolve(host, std::to_string(port), tcp::resolver::numeric_service, ec);
  if (ec || results.empty()) {
    throw StoreBindError("cannot listen on " + endpoint_text(host, port) + ": cannot resolve '" + host +
                         "' (" + ec.message() + "); pass a numeric address such as 127.0.0.1");
  }
  return results.begin()->endpoint();
}

std::string port_in_use_message(const std::string& where, std::uint16_t port) {
  std::string message = "cannot listen on " + where + ": address in use";
  if (auto owner = find_listener(port)) {
    message += " by pid " + std::to_string(owner->pid);
    if (!owner->command_line.empty()) message += " (" + owner->command_line + ")";
    message += "; pass --master-port=0 or stop that process";
  } else {
    message += "; pass --master-port=0 or free that port";
  }
  return message;
}

}  // namespace

void StoreServer::Impl::listen() {
  const auto endpoint = resolve_bind_endpoint(m_io, m_options.bind_address, m_options.port);
  const auto where = endpoint_text(endpoint.address().to_string(), m_options.port);
  boost::system::error_code ec;
  m_acceptor.open(endpoint.protocol(), ec);
  if (ec) throw StoreBindError("cannot listen on " + where + ": " + ec.message());
  ::fcntl(m_acceptor.native_handle(), F_SETFD, FD_CLOEXEC);
  // Lets a restarted launcher rebind at once while old connections sit in TIME_WAIT; Linux
  // still refuses a port that another socket is listening on.
  m_acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (endpoint.address().is_v6() && endpoint.address().is_unspecified()) {
    m_acceptor.set_option(asio::ip::v6_only(false), ec);  // "::" means every interface, IPv4 too
  }
  m_acceptor.bind(endpoint, ec);
  if (ec == asio::error::address_in_use) throw StoreBindError(port_in_use_message(where, m_options.port));
  if (ec) throw StoreBindError("cannot listen on " + where + ": " + ec.message());
  m_acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec == asio::error::address_in_use) throw StoreBindError(port_in_use_message(where, m_options.port));
  if (ec) throw StoreBindError("cannot listen on " + where + ": " + ec.message());
  const auto bound = m_acceptor.local_endpoint();
  m_port = bound.port();
  m_address = bound.address().to_string();
}

void StoreServer::Impl::do_accept() {
  if (m_stopped) return;
  m_acceptor.async_accept([self = shared_from_this()](const boost::system::error_code& ec, tcp::socket socket) {
    if (self->m_stopped || ec == asio::error::operation_aborted) return;
    if (ec) {
      // Out of descriptors (or memory): the pending connection stays in the backlog and the
      // acceptor stays readable, so retrying at once would spin. Wait a little instead.
      spdlog::warn("store: accept failed: {}; retrying in 100 ms", ec.message());
      self->m_retry_timer.expires_after(std::chrono::milliseconds(100));
      self->m_retry_timer.async_wait([self](const boost::system::error_code& timer_ec) {
        if (!timer_ec) self->do_accept();
      });
      return;
    }
    if (self->m_connections.size() >= self->m_options.limits.max_connections) {
      boost::system::error_code peer_ec;
      auto peer = socket.remote_endpoint(peer_ec);
      spdlog::warn("store: refusing connection from {}: {} connections open (the limit)",
                   peer_ec ? std::string("?") : endpoint_text(peer.address().to_string(), peer.port()),
                   self->m_connections.size());
      boost::system::error_code close_ec;
      socket.close(close_ec);
    } else {
      const ConnectionId id = self->m_next_id++;
      auto connection = std::make_shared<StoreConnection>(std::move(socket), id, *self, self->m_options.protocol,
                                                          self->m_options.limits);
      self->m_connections.emplace(id, connection);
      if (self->m_observer != nullptr) {
        self->m_observer->on_open(id, connection->peer_ip(), connection->peer_port(), connection->local_port());
      }
      if (connection->is_open()) connection->start();
    }
    self->do_accept();
  });
}

void StoreServer::Impl::on_connection_request(StoreConnection& connection, const Request& request) {
  if (request.op == Op::Validate) return;
  if (m_observer != nullptr) {
    m_observer->on_request(connection.id(), request.op,
                           request.keys.empty() ? std::string_view() : std::string_view(request.keys[0]));
    if (!connection.is_open()) return;  // the observer reset or stopped the server
  }
  m_effects.clear();
  m_state.apply(connection.id(), request, m_effects);
  if (m_effects.close) {
    connection.close(std::string(op_name(request.op)) + ": " + m_effects.error);
    return;
  }
  connection.deliver(m_effects.reply);
  static constexpr char k_stop_waiting = static_cast<char>(WaitResponse::StopWaiting);
  for (ConnectionId woken : m_effects.woken) {
    auto it = m_connections.find(woken);
    if (it != m_connections.end()) it->second->deliver(std::string_view(&k_stop_waiting, 1));
  }
}

void StoreServer::Impl::on_connection_closed(StoreConnection& connection) {
  const ConnectionId id = connection.id();
  m_state.disconnect(id);
  m_connections.erase(id);
  if (m_observer != nullptr) m_observer->on_close(id);
}

void StoreServer::Impl::close_all() {
  // Closing calls back into on_connection_closed, which erases from the map: walk a copy.
  std::vector<std::shared_ptr<StoreConnection>> all;
  all.reserve(m_connections.size());
  for (auto& [id, connection] : m_connections) all.push_back(connection);
  for (auto& connection : all) connection->close({});
}

void StoreServer::Impl::reset() {
  close_all();
  m_state.clear();
}

void StoreServer::Impl::stop() {
  if (m_stopped) return;
  m_stopped = true;
  boost::system::error_code ec;
  m_acceptor.close(ec);
  m_retry_timer.cancel();
  close_all();
}

StoreServer::StoreServer(asio::io_context& io, ServerOptions options, StoreObserver* observer)
    : m_impl(std::make_shared<Impl>(io, std::move(options), observer)) {
  m_impl->listen();
  m_impl->do_accept();
}

StoreServer::~StoreServer() {
  // The observer may already be half torn down by its owner: no callbacks from here on.
  m_impl->m_observer = nullptr;
  m_impl->stop();
}

std::uint16_t StoreServer::port() const { return m_impl->m_port; }
const std::string& StoreServer::address() const { return m_impl->m_address; }
void StoreServer::reset() { m_impl->reset(); }
void StoreServer::stop() { m_impl->stop(); }
std::size_t StoreServer::connection_count() const { return m_impl->m_connections.size(); }
const StoreState& StoreServer::state() const { return m_impl->m_state; }

}  // namespace rankrun::rendezvous
