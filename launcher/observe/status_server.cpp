#include "launcher/observe/status_server.hpp"

#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <boost/asio/read_until.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>
#include <chrono>
#include <spdlog/spdlog.h>

#include "launcher/types/launch_error.hpp"
#include "launcher/observe/http_answer.hpp"
#include "base/host_port.hpp"

namespace rankrun::launcher::observe {

namespace asio = boost::asio;
using local = asio::local::stream_protocol;
using tcp = asio::ip::tcp;
namespace http = boost::beast::http;

namespace {

// A client gets this long for its request; its answer is written within the same bound.
constexpr auto k_session_time = std::chrono::seconds(5);
// The sessions one server keeps open at once; more are closed as they come.
constexpr int k_max_sessions = 32;

// One exchange on the status socket: read the request (up to `limit` bytes, ending with `end`),
// ask the job, write the answer, close. Everything it holds is its own (shared_from_this).
template <typename Socket>
class Exchange : public std::enable_shared_from_this<Exchange<Socket>> {
 public:
  using Answer = std::function<std::optional<std::string>(std::string_view, const JobStatus&)>;
  Exchange(Socket socket, std::size_t limit, std::string end, StatusSource& source, std::shared_ptr<bool> alive,
           std::shared_ptr<int> open, Answer answer)
      : m_socket(std::move(socket)),
        m_buffer(limit),
        m_end(std::move(end)),
        m_source(source),
        m_alive(std::move(alive)),
        m_open(std::move(open)),
        m_answer(std::move(answer)),
        m_timer(m_socket.get_executor()) {
    ++*m_open;
  }
  ~Exchange() { --*m_open; }

  void start() {
    auto self = this->shared_from_this();
    m_timer.expires_after(k_session_time);
    m_timer.async_wait([self](boost::system::error_code ec) {
      if (!ec) {
        boost::system::error_code ignored;
        self->m_socket.close(ignored);  // too slow: this client only
      }
    });
    asio::async_read_until(m_socket, m_buffer, m_end, [self](boost::system::error_code ec, std::size_t n) {
      if (ec) return self->finish();  // closed, too long (the buffer's limit) or timed out
      std::string request(asio::buffers_begin(self->m_buffer.data()),
                          asio::buffers_begin(self->m_buffer.data()) + static_cast<std::ptrdiff_t>(n));
      if (!*self->m_alive) return self->finish();
      self->m_source([self, request](JobStatus status) {
        if (!*self->m_alive || !self->m_socket.is_open()) return;
        auto text = self->m_answer(request, status);
        if (!text) return self->finish();
        self->m_reply = std::move(*text);
        asio::async_write(self->m_socket, asio::buffer(self->m_reply),
                          [self](boost::system::error_code, std::size_t) { self->finish(); });
      });
    });
  }

 private:
  void finish() {
    m_timer.cancel();
    boost::system::error_code ignored;
    m_socket.shutdown(asio::socket_base::shutdown_both, ignored);
    m_socket.close(ignored);
  }

  Socket m_socket;
  asio::streambuf m_buffer;
  std::string m_end;
  StatusSource& m_source;
  std::shared_ptr<bool> m_alive;
  std::shared_ptr<int> m_open;
  Answer m_answer;
  asio::steady_timer m_timer;
  std::string m_reply;
};

// One HTTP exchange on the metrics port: Beast reads the request's head (bounded:
// bound_http_parser), the job is asked, the response is written, the connection closed. A head
// over the bound, or cut short, closes it unanswered; one that is not HTTP gets 400 at once.
class HttpExchange : public std::enable_shared_from_this<HttpExchange> {
 public:
  HttpExchange(tcp::socket socket, StatusSource& source, std::shared_ptr<bool> alive, std::shared_ptr<int> open)
      : m_socket(std::move(socket)),
        m_buffer(k_max_http_request),
        m_source(source),
        m_alive(std::move(alive)),
        m_open(std::move(open)),
        m_timer(m_socket.get_executor()) {
    bound_http_parser(m_parser);
    ++*m_open;
  }
  ~HttpExchange() { --*m_open; }

  void start() {
    auto self = shared_from_this();
    m_timer.expires_after(k_session_time);
    m_timer.async_wait([self](boost::system::error_code ec) {
      if (!ec) {
        boost::system::error_code ignored;
        self->m_socket.close(ignored);  // too slow: this client only
      }
    });
    http::async_read_header(m_socket, m_buffer, m_parser, [self](boost::system::error_code ec, std::size_t n) {
      if (!*self->m_alive) return self->finish();
      if (ec) {
        if (auto refused = answer_http_error(ec)) return self->reply(std::move(*refused));
        return self->finish();  // over the bounds, cut short, closed or timed out
      }
      // The parser bounds the request line and the fields each; the head as a whole is bounded too.
      if (n > k_max_http_request) return self->finish();
      self->m_source([self](JobStatus status) {
        if (!*self->m_alive || !self->m_socket.is_open()) return;
        self->reply(answer_http(self->m_parser.get(), status));
      });
    });
  }

 private:
  void reply(HttpResponse response) {
    m_response = std::move(response);
    http::async_write(m_socket, m_response,
                      [self = shared_from_this()](boost::system::error_code, std::size_t) { self->finish(); });
  }

  void finish() {
    m_timer.cancel();
    boost::system::error_code ignored;
    m_socket.shutdown(asio::socket_base::shutdown_both, ignored);
    m_socket.close(ignored);
  }

  tcp::socket m_socket;
  boost::beast::flat_buffer m_buffer;
  HttpParser m_parser;
  StatusSource& m_source;
  std::shared_ptr<bool> m_alive;
  std::shared_ptr<int> m_open;
  asio::steady_timer m_timer;
  HttpResponse m_response;
};

}  // namespace

std::string socket_path_through(int dir_fd) {
  return "/proc/self/fd/" + std::to_string(dir_fd) + "/" + k_status_socket;
}

StatusServer::StatusServer(asio::io_context& io, int dir_fd, std::string path, StatusSource source)
    : m_acceptor(io),
      m_dir_fd(dir_fd),
      m_path(std::move(path)),
      m_source(std::move(source)),
      m_alive(std::make_shared<bool>(true)) {
  ::unlinkat(m_dir_fd, k_status_socket, 0);
  m_acceptor.open(local());
  // Only this user (the run directory is private too); the peer's uid is checked as well. The
  // socket is bound through the directory's descriptor: the run directory's path may be longer
  // than a socket address holds, and it is reached following no link.
  const mode_t old = ::umask(0177);
  boost::system::error_code ec;
  m_acceptor.bind(local::endpoint(socket_path_through(m_dir_fd)), ec);
  ::umask(old);
  if (!ec) m_acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    spdlog::warn("rankrun status will not reach this job: cannot listen on {}: {}", m_path, ec.message());
    boost::system::error_code ignored;
    m_acceptor.close(ignored);
    return;
  }
  accept();
}

StatusServer::~StatusServer() { close(); }

void StatusServer::close() {
  *m_alive = false;
  if (m_acceptor.is_open()) {
    boost::system::error_code ignored;
    m_acceptor.close(ignored);
    ::unlinkat(m_dir_fd, k_status_socket, 0);
  }
}

void StatusServer::accept() {
  m_acceptor.async_accept([this, alive = m_alive, open = m_open](boost::system::error_code ec, local::socket socket) {
    if (!*alive) return;
    if (!ec) {
      ucred cred{};
      socklen_t len = sizeof cred;
      const bool allowed = ::getsockopt(socket.native_handle(), SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 &&
                           (cred.uid == ::getuid() || cred.uid == 0);
      if (allowed && *open < k_max_sessions) {
        std::make_shared<Exchange<local::socket>>(
            std::move(socket), k_max_status_request, "\n", m_source, m_alive, open,
            [](std::string_view line, const JobStatus& s) -> std::optional<std::string> {
              if (auto answer = answer_status_request(line, s)) return answer;
              return std::string("error: unknown request; send 'status', 'status json' or 'metrics'\n");
            })
            ->start();
      }
    }
    if (m_acceptor.is_open()) accept();
  });
}

MetricsServer::MetricsServer(asio::io_context& io, const std::string& host, int port, StatusSource source)
    : m_acceptor(io), m_source(std::move(source)), m_alive(std::make_shared<bool>(true)) {
  boost::system::error_code ec;
  const auto address = asio::ip::make_address(host, ec);
  if (ec) throw LaunchError("--metrics-port: '" + host + "' is not an address; give ADDRESS:PORT or PORT");
  const tcp::endpoint endpoint(address, static_cast<std::uint16_t>(port));
  m_acceptor.open(endpoint.protocol());
  m_acceptor.set_option(tcp::acceptor::reuse_address(true));
  m_acceptor.bind(endpoint, ec);
  if (ec) {
    throw LaunchError("--metrics-port: cannot listen on " + host_port(host, static_cast<std::uint32_t>(port)) + ": " +
                      ec.message() + "; choose a free port");
  }
  m_acceptor.listen(asio::socket_base::max_listen_connections);
  accept();
}

MetricsServer::~MetricsServer() { close(); }

void MetricsServer::close() {
  *m_alive = false;
  boost::system::error_code ignored;
  m_acceptor.close(ignored);
}

std::uint16_t MetricsServer::port() const { return m_acceptor.local_endpoint().port(); }

void MetricsServer::accept() {
  m_acceptor.async_accept([this, alive = m_alive, open = m_open](boost::system::error_code ec, tcp::socket socket) {
    if (!*alive) return;
    if (!ec && *open < k_max_sessions) {
      std::make_shared<HttpExchange>(std::move(socket), m_source, m_alive, open)->start();
    }
    if (m_acceptor.is_open()) accept();
  });
}

}  // namespace rankrun::launcher::observe
