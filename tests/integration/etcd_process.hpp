#pragma once
// What the tests of the etcd client (test_etcd_client.cpp, test_etcd_tls.cpp) share: an etcd
// of their own (Debian's etcd-server, /usr/bin/etcd) on free loopback ports in a fresh data
// directory, stopped by its pid, over http or https; free ports; errors as text.

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <doctest/doctest.h>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "rendezvous/etcd_client.hpp"
#include "tests/unit/skip.hpp"

namespace rankrun::rendezvous::test {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr const char* k_etcd = "/usr/bin/etcd";

inline bool have_etcd() { return ::access(k_etcd, X_OK) == 0; }

// In a case's own body: the case is skipped (skip.hpp), not passed, where etcd is missing.
#define REQUIRE_ETCD() SKIP_UNLESS(have_etcd(), "/usr/bin/etcd is missing (apt-get install etcd-server)")

// A port the kernel just handed out on `address` (free unless someone grabs it in between).
inline std::uint16_t free_port(bool ipv6 = false) {
  const int s = ::socket(ipv6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(s >= 0);
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
  REQUIRE(::bind(s, reinterpret_cast<sockaddr*>(&addr), len) == 0);
  REQUIRE(::getsockname(s, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  ::close(s);
  return ntohs(ipv6 ? reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port
                    : reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
}

inline EtcdOptions quick() {
  EtcdOptions o;
  o.connect_timeout = 2s;
  o.timeout = 10s;
  return o;
}

// One etcd member of its own. Its output goes to etcd.log next to the data directory, shown
// when it does not come up.
/// How an EtcdProcess serves its clients: over https with the server's certificate and key
/// (and, with a trusted CA, requiring a client certificate signed by it), and what its
/// wait_ready() connects with then.
struct EtcdServing {
  bool ipv6 = false;
  std::string cert, key;                         // https when given
  std::string trusted_ca;                        // --trusted-ca-file --client-cert-auth when given
  std::vector<std::string> also_listen;          // more IPv4 addresses to serve clients on, same port
  std::vector<std::string> extra;                // more flags
  std::shared_ptr<EtcdSecurity> ready_security;  // how wait_ready() reaches it
};

class EtcdProcess {
 public:
  explicit EtcdProcess(bool ipv6 = false)
      : EtcdProcess([&] {
          EtcdServing s;
          s.ipv6 = ipv6;
          return s;
        }()) {}

  explicit EtcdProcess(const EtcdServing& serving) : m_security(serving.ready_security) {
    const bool ipv6 = serving.ipv6;
    std::string base = (std::filesystem::temp_directory_path() / "rankrun-etcd-XXXXXX").string();
    REQUIRE(::mkdtemp(base.data()) != nullptr);
    m_dir = base;
    m_host = ipv6 ? "::1" : "127.0.0.1";
    m_port = free_port(ipv6);
    const std::string host_url = ipv6 ? "[::1]" : "127.0.0.1";
    const std::string client =
        (serving.cert.empty() ? "http://" : "https://") + host_url + ":" + std::to_string(m_port);
    m_url = client;
    std::string listen = client;
    for (const auto& address : serving.also_listen) {
      listen +=
          std::string(",") + (serving.cert.empty() ? "http://" : "https://") + address + ":" + std::to_string(m_port);
    }
    const std::string peer = "http://127.0.0.1:" + std::to_string(free_port());
    std::vector<std::string> args = {k_etcd,
                                     "--name",
                                     "default",
                                     "--data-dir",
                                     (m_dir / "data").string(),
                                     "--listen-client-urls",
                                     listen,
                                     "--advertise-client-urls",
                                     client,
                                     "--listen-peer-urls",
                                     peer,
                                     "--initial-advertise-peer-urls",
                                     peer,
                                     "--initial-cluster",
                                     "default=" + peer};
    if (!serving.cert.empty()) {
      args.insert(args.end(), {"--cert-file", serving.cert, "--key-file", serving.key});
    }
    if (!serving.trusted_ca.empty()) {
      args.insert(args.end(), {"--trusted-ca-file", serving.trusted_ca, "--client-cert-auth"});
    }
    args.insert(args.end(), serving.extra.begin(), serving.extra.end());
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const std::string log = (m_dir / "etcd.log").string();
    m_pid = ::fork();
    REQUIRE(m_pid >= 0);
    if (m_pid == 0) {
      // Only async-signal-safe calls between fork and exec. etcd dies with the test.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (fd >= 0) {
        ::dup2(fd, STDOUT_FILENO);
        ::dup2(fd, STDERR_FILENO);
      }
      ::execv(k_etcd, argv.data());
      ::_exit(127);
    }
    if (auto error = wait_ready(); !error.empty()) {
      const auto log_tail = log_text();
      stop();
      std::error_code ec;
      std::filesystem::remove_all(m_dir, ec);
      FAIL(error << ":\n" << log_tail);
    }
  }
  ~EtcdProcess() {
    stop();
    std::error_code ec;
    std::filesystem::remove_all(m_dir, ec);
  }
  EtcdProcess(const EtcdProcess&) = delete;
  EtcdProcess& operator=(const EtcdProcess&) = delete;

  const std::string& host() const { return m_host; }
  std::uint16_t port() const { return m_port; }
  /// "https://127.0.0.1:PORT", as etcdctl takes it.
  const std::string& url() const { return m_url; }
  std::string endpoint() const { return m_host + ":" + std::to_string(m_port); }

  EtcdClient client(std::string prefix = "test/", EtcdOptions options = quick()) const {
    return EtcdClient(m_host, m_port, std::move(prefix), options);
  }

  // SIGTERM, then SIGKILL after 5 s.
  void stop() {
    if (m_pid <= 0) return;
    ::kill(m_pid, SIGTERM);
    const auto deadline = Clock::now() + 5s;
    int status = 0;
    while (::waitpid(m_pid, &status, WNOHANG) == 0) {
      if (Clock::now() >= deadline) {
        ::kill(m_pid, SIGKILL);
        ::waitpid(m_pid, &status, 0);
        break;
      }
      std::this_thread::sleep_for(20ms);
    }
    m_pid = -1;
  }

 private:
  std::shared_ptr<EtcdSecurity> m_security;
  std::filesystem::path m_dir;
  std::string m_url;
  std::string m_host;
  std::uint16_t m_port = 0;
  pid_t m_pid = -1;

  // Up once a range succeeds (the member has elected itself leader); else why not.
  std::string wait_ready() {
    const auto deadline = Clock::now() + 30s;
    std::string last;
    while (Clock::now() < deadline) {
      int status = 0;
      if (::waitpid(m_pid, &status, WNOHANG) == m_pid) {
        m_pid = -1;
        return "etcd exited at start";
      }
      try {
        EtcdOptions o;
        o.connect_timeout = 200ms;
        o.timeout = 2s;
        o.security = m_security;
        EtcdClient c(m_host, m_port, "", o);
        (void)c.try_get("ready");
        return {};
      } catch (const StoreError& e) {
        last = e.what();
      }
      std::this_thread::sleep_for(50ms);
    }
    return "etcd did not come up within 30 s (" + last + ")";
  }

  std::string log_text() const {
    std::ifstream in(m_dir / "etcd.log");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return text.size() > 4000 ? text.substr(text.size() - 4000) : text;
  }
};

inline bool contains(const std::string& text, std::string_view part) { return text.find(part) != std::string::npos; }

template <typename F>
std::string error_of(F f) {
  try {
    f();
  } catch (const StoreError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace rankrun::rendezvous::test
