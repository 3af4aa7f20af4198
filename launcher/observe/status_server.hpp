#pragma once
// The job's own local socket, `<run directory>/status.sock`, through which `rankrun status` asks
// the running rankrun for the job's state, and the HTTP endpoint Prometheus scrapes
// (--metrics-port). Each request is one short exchange: a request (bounded in size and time),
// the answer, the connection closed. A malformed or oversized request closes only itself; the
// job never waits for a client.

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <functional>
#include <memory>
#include <string>

#include "launcher/observe/job_status.hpp"

namespace rankrun::launcher::observe {

/// How a server gets the job's state: it asks, the job answers (at once, or once another node's
/// progress came).
using StatusSource = std::function<void(std::function<void(JobStatus)> answer)>;

/// The status socket's name in the run directory.
inline constexpr const char* k_status_socket = "status.sock";

/// "/proc/self/fd/<dir_fd>/status.sock": the socket reached through its directory's descriptor
/// (a path of any length fits a socket address this way).
std::string socket_path_through(int dir_fd);

class StatusServer {
 public:
  /// Listens on status.sock in the run directory `dir_fd` (at `path`, for messages), mode 0600.
  /// Peers of another user (but root) are closed at once. When it cannot listen, a warning says
  /// so and the job runs on.
  StatusServer(boost::asio::io_context& io, int dir_fd, std::string path, StatusSource source);
  ~StatusServer();
  void close();

 private:
  void accept();
  boost::asio::local::stream_protocol::acceptor m_acceptor;
  int m_dir_fd;
  std::string m_path;
  StatusSource m_source;
  std::shared_ptr<bool> m_alive;
  std::shared_ptr<int> m_open = std::make_shared<int>(0);
};

class MetricsServer {
 public:
  /// Binds `host`:`port` (throws LaunchError naming the flag when it cannot: a port in use).
  MetricsServer(boost::asio::io_context& io, const std::string& host, int port, StatusSource source);
  ~MetricsServer();
  void close();
  std::uint16_t port() const;

 private:
  void accept();
  boost::asio::ip::tcp::acceptor m_acceptor;
  StatusSource m_source;
  std::shared_ptr<bool> m_alive;
  std::shared_ptr<int> m_open = std::make_shared<int>(0);
};

}  // namespace rankrun::launcher::observe
