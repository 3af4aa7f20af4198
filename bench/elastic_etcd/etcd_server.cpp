#include "bench/elastic_etcd/etcd_server.hpp"

#include <unistd.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string_view>

#include "launcher/processes/proc_parse.hpp"

namespace rankrun::bench::etcd_bench {

namespace http = boost::beast::http;

double process_cpu_s(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto stat = launcher::parse_proc_stat(text);
  if (!stat) return 0;
  return static_cast<double>(stat->cpu_ticks) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

EtcdServer::EtcdServer(const std::string& binary, const std::string& tmp)
    : m_member([&] {
        test_helpers::EtcdMemberOptions o;
        o.binary = binary;
        o.parent = tmp;
        o.extra = {"--logger", "zap", "--log-level", "warn"};
        o.stop_grace = std::chrono::seconds(10);
        return o;
      }()) {}

Metrics operator-(const Metrics& a, const Metrics& b) {
  Metrics d;
  for (std::size_t i = 0; i < d.started.size(); ++i) d.started[i] = a.started[i] - b.started[i];
  d.started_all = a.started_all - b.started_all;
  d.grpc_in_bytes = a.grpc_in_bytes - b.grpc_in_bytes;
  d.grpc_out_bytes = a.grpc_out_bytes - b.grpc_out_bytes;
  d.fsyncs = a.fsyncs - b.fsyncs;
  d.puts = a.puts - b.puts;
  d.cpu_s = a.cpu_s - b.cpu_s;
  return d;
}

// GET `path` from etcd's client port; its body. Connect, request and reply within 10 s.
std::string http_get(std::uint16_t port, const std::string& path) {
  boost::asio::io_context io;
  boost::beast::tcp_stream stream(io);
  http::request<http::empty_body> request{http::verb::get, path, 11};
  request.set(http::field::host, k_host);
  http::response<http::string_body> response;
  boost::beast::flat_buffer buffer;
  boost::system::error_code failed;
  const char* step = "connect to";
  stream.expires_after(std::chrono::seconds(10));
  const boost::asio::ip::tcp::endpoint etcd(boost::asio::ip::make_address(k_host), port);
  stream.async_connect(etcd, [&](boost::system::error_code ec) {
    if (ec) {
      failed = ec;
      return;
    }
    step = "send to";
    http::async_write(stream, request, [&](boost::system::error_code ec2, std::size_t) {
      if (ec2) {
        failed = ec2;
        return;
      }
      step = "read from";
      http::async_read(stream, buffer, response, [&](boost::system::error_code ec3, std::size_t) { failed = ec3; });
    });
  });
  io.run();
  if (failed) throw std::runtime_error(std::string(step) + " etcd's " + path + ": " + failed.message());
  if (response.result() != http::status::ok) {
    throw std::runtime_error("etcd's " + path + " answered " + std::to_string(response.result_int()));
  }
  return std::move(response.body());
}

Metrics read_metrics(const EtcdServer& etcd) {
  Metrics m;
  const auto text = http_get(etcd.port(), "/metrics");
  std::size_t pos = 0;
  while (pos < text.size()) {
    auto end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    const std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    if (line.empty() || line[0] == '#') continue;
    const auto space = line.rfind(' ');
    if (space == std::string_view::npos) continue;
    const auto name = line.substr(0, space);
    const double value = std::strtod(std::string(line.substr(space + 1)).c_str(), nullptr);
    constexpr std::string_view started = "grpc_server_started_total{grpc_method=\"";
    if (name.substr(0, started.size()) == started) {
      if (name.find("grpc_service=\"etcdserverpb.") == std::string_view::npos) continue;
      m.started_all += value;
      const auto method = name.substr(started.size(), name.find('"', started.size()) - started.size());
      for (std::size_t i = 0; i < k_methods.size(); ++i) {
        if (method == k_methods[i]) m.started[i] += value;
      }
    } else if (name == "etcd_network_client_grpc_received_bytes_total") {
      m.grpc_in_bytes = value;
    } else if (name == "etcd_network_client_grpc_sent_bytes_total") {
      m.grpc_out_bytes = value;
    } else if (name == "etcd_disk_wal_fsync_duration_seconds_count") {
      m.fsyncs = value;
    } else if (name == "etcd_debugging_mvcc_put_total") {
      m.puts = value;
    }
  }
  m.cpu_s = etcd.cpu_s();
  return m;
}

}  // namespace rankrun::bench::etcd_bench
