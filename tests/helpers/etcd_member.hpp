#pragma once
// One etcd member of its own (Debian's etcd-server), for the etcd client's tests
// (tests/integration/etcd_process.hpp) and the etcd benchmark (bench/elastic_etcd/): free
// loopback ports, a fresh data directory, etcd's output in etcd.log beside it, up once a read
// succeeds, stopped by its pid (SIGTERM, then SIGKILL) with the directory removed. Errors are
// std::runtime_error with etcd's last output.

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "rendezvous/etcd_client.hpp"

namespace rankrun::test_helpers {

/// A TCP port of the loopback address free at the moment (unless someone takes it in between).
inline std::uint16_t free_loopback_port(bool ipv6 = false) {
  const int s = ::socket(ipv6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) throw std::runtime_error("socket: " + std::string(std::strerror(errno)));
  sockaddr_storage addr{};
  socklen_t len = 0;
  if (ipv6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&addr);
    a->sin6_family = AF_INET6;
    a->sin6_addr = in6addr_loopback;
    len = sizeof(*a);
  } else {
    auto* a = reinterpret_cast<sockaddr_in*>(&addr);
    a->sin_family = AF_INET;
    a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    len = sizeof(*a);
  }
  if (::bind(s, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
      ::getsockname(s, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const int error = errno;
    ::close(s);
    throw std::runtime_error("bind to a free loopback port: " + std::string(std::strerror(error)));
  }
  ::close(s);
  return ntohs(ipv6 ? reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port
                    : reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
}

/// How an EtcdMember runs and serves its clients.
struct EtcdMemberOptions {
  std::string binary = "/usr/bin/etcd";
  std::filesystem::path parent = std::filesystem::temp_directory_path();  // its directory goes in here
  bool ipv6 = false;
  std::string cert, key;                                     // https when given
  std::string trusted_ca;                                    // --trusted-ca-file --client-cert-auth when given
  std::vector<std::string> also_listen;                      // more IPv4 addresses to serve clients on, same port
  std::vector<std::string> extra;                            // more flags
  std::shared_ptr<rendezvous::EtcdSecurity> ready_security;  // how the readiness read reaches it
  std::chrono::milliseconds stop_grace{5000};                // SIGTERM to SIGKILL
};

class EtcdMember {
 public:
  using Clock = std::chrono::steady_clock;

  explicit EtcdMember(EtcdMemberOptions options) : m_options(std::move(options)) {
    std::string base = (m_options.parent / "rankrun-etcd-XXXXXX").string();
    if (::mkdtemp(base.data()) == nullptr) {
      throw std::runtime_error("mkdtemp in " + m_options.parent.string() + ": " + std::strerror(errno));
    }
    m_dir = base;
    m_host = m_options.ipv6 ? "::1" : "127.0.0.1";
    m_port = free_loopback_port(m_options.ipv6);
    std::uint16_t peer_port = free_loopback_port();
    while (peer_port == m_port) peer_port = free_loopback_port();
    const std::string scheme = m_options.cert.empty() ? "http://" : "https://";
    m_url = scheme + (m_options.ipv6 ? "[::1]" : "127.0.0.1") + ":" + std::to_string(m_port);
    std::string listen = m_url;
    for (const auto& address : m_options.also_listen) listen += "," + scheme + address + ":" + std::to_string(m_port);
    const std::string peer = "http://127.0.0.1:" + std::to_string(peer_port);
    std::vector<std::string> args = {m_options.binary,
                                     "--name",
                                     "default",
                                     "--data-dir",
                                     (m_dir / "data").string(),
                                     "--listen-client-urls",
                                     listen,
                                     "--advertise-client-urls",
                                     m_url,
                                     "--listen-peer-urls",
                                     peer,
                                     "--initial-advertise-peer-urls",
                                     peer,
                                     "--initial-cluster",
                                     "default=" + peer};
    if (!m_options.cert.empty()) args.insert(args.end(), {"--cert-file", m_options.cert, "--key-file", m_options.key});
    if (!m_options.trusted_ca.empty()) {
      args.insert(args.end(), {"--trusted-ca-file", m_options.trusted_ca, "--client-cert-auth"});
    }
    args.insert(args.end(), m_options.extra.begin(), m_options.extra.end());
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const std::string log = (m_dir / "etcd.log").string();
    m_pid = ::fork();
    if (m_pid < 0) {
      const int error = errno;
      remove_dir();
      throw std::runtime_error("fork: " + std::string(std::strerror(error)));
    }
    if (m_pid == 0) {
      // Only async-signal-safe calls between fork and exec. etcd dies with its parent.
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
  ~EtcdMember() { stop(); }
  EtcdMember(const EtcdMember&) = delete;
  EtcdMember& operator=(const EtcdMember&) = delete;

  const std::string& host() const { return m_host; }
  std::uint16_t port() const { return m_port; }
  pid_t pid() const { return m_pid; }
  /// "https://127.0.0.1:PORT", as etcdctl takes it.
  const std::string& url() const { return m_url; }

  /// SIGTERM, then SIGKILL after the grace; its directory goes.
  void stop() {
    if (m_pid > 0) {
      ::kill(m_pid, SIGTERM);
      const auto deadline = Clock::now() + m_options.stop_grace;
      int status = 0;
      while (::waitpid(m_pid, &status, WNOHANG) == 0) {
        if (Clock::now() >= deadline) {
          ::kill(m_pid, SIGKILL);
          ::waitpid(m_pid, &status, 0);
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      m_pid = -1;
    }
    remove_dir();
  }

  /// The last 4000 bytes etcd wrote.
  std::string log_tail() const {
    std::ifstream in(m_dir / "etcd.log");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return text.size() > 4000 ? text.substr(text.size() - 4000) : text;
  }

 private:
  EtcdMemberOptions m_options;
  std::filesystem::path m_dir;
  std::string m_url;
  std::string m_host;
  std::uint16_t m_port = 0;
  pid_t m_pid = -1;

  void remove_dir() {
    if (m_dir.empty()) return;
    std::error_code ec;
    std::filesystem::remove_all(m_dir, ec);
    m_dir.clear();
  }

  // Up once a read succeeds (the member has elected itself leader); else why not.
  std::string wait_ready() {
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    std::string last;
    while (Clock::now() < deadline) {
      int status = 0;
      if (::waitpid(m_pid, &status, WNOHANG) == m_pid) {
        m_pid = -1;
        return "etcd exited at start";
      }
      try {
        rendezvous::EtcdOptions o;
        o.connect_timeout = std::chrono::milliseconds(200);
        o.timeout = std::chrono::seconds(2);
        o.security = m_options.ready_security;
        rendezvous::EtcdClient c(m_host, m_port, "", o);
        (void)c.try_get("ready");
        return {};
      } catch (const rendezvous::StoreError& e) {
        last = e.what();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return "etcd did not come up within 30 s (" + last + ")";
  }
};

}  // namespace rankrun::test_helpers
