#include "bench/elastic_etcd/etcd_server.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>

#include "rendezvous/etcd_client.hpp"

namespace rankrun::bench::etcd_bench {

namespace rdzv = ::rankrun::rendezvous;

// user + system CPU seconds of process `pid` (/proc/<pid>/stat, clock ticks).
double process_cpu_s(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto paren = text.rfind(')');
  if (paren == std::string::npos) return 0;
  std::vector<std::string> fields;
  std::size_t pos = paren + 2;
  while (pos < text.size()) {
    auto end = text.find(' ', pos);
    if (end == std::string::npos) end = text.size();
    fields.push_back(text.substr(pos, end - pos));
    pos = end + 1;
  }
  // After "(comm)": state is field 3; utime and stime are fields 14 and 15.
  if (fields.size() < 13) return 0;
  const double ticks = static_cast<double>(::sysconf(_SC_CLK_TCK));
  return (std::stod(fields[11]) + std::stod(fields[12])) / ticks;
}

std::uint16_t free_port() {
  const int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) throw std::runtime_error("socket: " + std::string(std::strerror(errno)));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (::bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(s, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(s);
    throw std::runtime_error("bind: " + std::string(std::strerror(errno)));
  }
  ::close(s);
  return ntohs(addr.sin_port);
}

EtcdServer::EtcdServer(const std::string& binary, const std::string& tmp) {
  std::string base = (std::filesystem::path(tmp) / "rankrun-etcdbench-XXXXXX").string();
  if (::mkdtemp(base.data()) == nullptr) throw std::runtime_error("mkdtemp in " + tmp + ": " + std::strerror(errno));
  m_dir = base;
  m_port = free_port();
  std::uint16_t peer_port = free_port();
  while (peer_port == m_port) peer_port = free_port();
  const std::string client = "http://" + std::string(k_host) + ":" + std::to_string(m_port);
  const std::string peer = "http://" + std::string(k_host) + ":" + std::to_string(peer_port);
  std::vector<std::string> args = {binary,
                                   "--name",
                                   "default",
                                   "--data-dir",
                                   (m_dir / "data").string(),
                                   "--listen-client-urls",
                                   client,
                                   "--advertise-client-urls",
                                   client,
                                   "--listen-peer-urls",
                                   peer,
                                   "--initial-advertise-peer-urls",
                                   peer,
                                   "--initial-cluster",
                                   "default=" + peer,
                                   "--logger",
                                   "zap",
                                   "--log-level",
                                   "warn"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const std::string log = (m_dir / "etcd.log").string();
  m_pid = ::fork();
  if (m_pid < 0) throw std::runtime_error("fork: " + std::string(std::strerror(errno)));
  if (m_pid == 0) {
    // Only async-signal-safe calls between fork and exec. etcd dies with the benchmark.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd >= 0) {
      ::dup2(fd, STDOUT_FILENO);
      ::dup2(fd, STDERR_FILENO);
    }
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  if (auto error = wait_ready(); !error.empty()) {
    const auto tail = log_tail();
    stop();
    throw std::runtime_error(error + ":\n" + tail);
  }
}

// SIGTERM, then SIGKILL after 10 s; the data directory goes.
void EtcdServer::stop() {
  if (m_pid > 0) {
    ::kill(m_pid, SIGTERM);
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    int status = 0;
    while (::waitpid(m_pid, &status, WNOHANG) == 0) {
      if (Clock::now() >= deadline) {
        ::kill(m_pid, SIGKILL);
        ::waitpid(m_pid, &status, 0);
        break;
      }
      std::this_thread::sleep_for(milliseconds(20));
    }
    m_pid = -1;
  }
  if (!m_dir.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(m_dir, ec);
    m_dir.clear();
  }
}

std::string EtcdServer::log_tail() const {
  std::ifstream in(m_dir / "etcd.log");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return text.size() > 3000 ? text.substr(text.size() - 3000) : text;
}

// Up once a range succeeds (the member has elected itself leader); else why not.
std::string EtcdServer::wait_ready() {
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  std::string last;
  while (Clock::now() < deadline) {
    int status = 0;
    if (::waitpid(m_pid, &status, WNOHANG) == m_pid) {
      m_pid = -1;
      return "etcd exited at start";
    }
    try {
      rdzv::EtcdOptions o;
      o.connect_timeout = milliseconds(200);
      o.timeout = std::chrono::seconds(2);
      rdzv::EtcdClient c(k_host, m_port, "", o);
      (void)c.try_get("ready");
      return {};
    } catch (const rdzv::StoreError& e) {
      last = e.what();
    }
    std::this_thread::sleep_for(milliseconds(50));
  }
  return "etcd did not come up within 30 s (" + last + ")";
}

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

// GET /metrics, HTTP/1.0 (the reply ends with the connection).
std::string http_get(std::uint16_t port, const std::string& path) {
  const int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) throw std::runtime_error("socket: " + std::string(std::strerror(errno)));
  timeval tv{10, 0};
  ::setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  if (::connect(s, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(s);
    throw std::runtime_error("connect to etcd's metrics: " + std::string(std::strerror(errno)));
  }
  const std::string request = "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  if (::send(s, request.data(), request.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(request.size())) {
    ::close(s);
    throw std::runtime_error("send to etcd's metrics failed");
  }
  std::string reply;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::recv(s, buf, sizeof(buf), 0);
    if (n > 0) {
      reply.append(buf, static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    break;
  }
  ::close(s);
  const auto body = reply.find("\r\n\r\n");
  return body == std::string::npos ? std::string() : reply.substr(body + 4);
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
