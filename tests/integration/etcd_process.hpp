#pragma once
// What the tests of the etcd client (test_etcd_client.cpp, test_etcd_tls.cpp) share: an etcd
// of their own (Debian's etcd-server, /usr/bin/etcd) on free loopback ports in a fresh data
// directory, stopped by its pid, over http or https; errors as text.

#include <unistd.h>

#include <chrono>
#include <doctest/doctest.h>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>

#include "rendezvous/etcd_client.hpp"
#include "tests/helpers/etcd_member.hpp"
#include "tests/unit/skip.hpp"

namespace rankrun::rendezvous::test {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr const char* k_etcd = "/usr/bin/etcd";

inline bool have_etcd() { return ::access(k_etcd, X_OK) == 0; }

// In a case's own body: the case is skipped (skip.hpp), not passed, where etcd is missing.
#define REQUIRE_ETCD() SKIP_UNLESS(have_etcd(), "/usr/bin/etcd is missing (apt-get install etcd-server)")

inline EtcdOptions quick() {
  EtcdOptions o;
  o.connect_timeout = 2s;
  o.timeout = 10s;
  return o;
}

/// How an EtcdProcess serves its clients: over https with the server's certificate and key
/// (and, with a trusted CA, requiring a client certificate signed by it), and what its
/// readiness read connects with then.
using EtcdServing = test_helpers::EtcdMemberOptions;

/// One etcd member of its own (tests/helpers/etcd_member.hpp); the case fails with etcd's
/// output when it does not come up.
class EtcdProcess {
 public:
  explicit EtcdProcess(bool ipv6 = false)
      : EtcdProcess([&] {
          EtcdServing s;
          s.ipv6 = ipv6;
          return s;
        }()) {}

  explicit EtcdProcess(const EtcdServing& serving) {
    try {
      m_member = std::make_unique<test_helpers::EtcdMember>(serving);
    } catch (const std::runtime_error& e) {
      FAIL(e.what());
    }
  }

  const std::string& host() const { return m_member->host(); }
  std::uint16_t port() const { return m_member->port(); }
  /// "https://127.0.0.1:PORT", as etcdctl takes it.
  const std::string& url() const { return m_member->url(); }
  std::string endpoint() const { return host() + ":" + std::to_string(port()); }

  EtcdClient client(std::string prefix = "test/", EtcdOptions options = quick()) const {
    return EtcdClient(host(), port(), std::move(prefix), options);
  }

  pid_t pid() const { return m_member->pid(); }
  // SIGTERM, then SIGKILL after 5 s.
  void stop() { m_member->stop(); }

 private:
  std::unique_ptr<test_helpers::EtcdMember> m_member;
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
