// EtcdClient against a real etcd (Debian's etcd-server, /usr/bin/etcd): each case starts its own
// on free loopback ports in a fresh data directory and stops it by its pid (etcd_process.hpp).
// Skipped (skip.hpp: CTest reports "Skipped", not "Passed"), with what to install, where etcd is
// not installed. The cases against a fake HTTP server (malformed replies) need no etcd.

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <doctest/doctest.h>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "rendezvous/etcd_client.hpp"
#include "tests/integration/etcd_process.hpp"

using namespace rankrun::rendezvous;
using namespace std::chrono_literals;
using namespace rankrun::rendezvous::test;

TEST_CASE("etcd: set, try_get, get, check, multi_get and delete_key, each under its prefix") {
  REQUIRE_ETCD();
  EtcdProcess etcd;
  auto a = etcd.client("job-a/");
  auto b = etcd.client("job-b/");
  a.set("k", "value");
  CHECK(a.get("k") == "value");
  CHECK(a.try_get("k") == "value");
  CHECK_FALSE(b.try_get("k").has_value());  // another prefix, another key
  CHECK_FALSE(a.try_get("missing").has_value());

  const std::string binary("\0\xFF\"\\\n{}", 7);
  a.set("bin", binary);
  CHECK(a.get("bin") == binary);
  a.set("empty", "");
  CHECK(a.try_get("empty") == "");  // etcd leaves an empty value out of its reply
  CHECK(a.check({"k", "bin", "empty"}));
  CHECK_FALSE(a.check({"k", "missing"}));
  CHECK(a.check({}));
  CHECK(a.multi_get({"empty", "k", "bin"}) == std::vector<std::string>{"", "value", binary});

  // More keys than one txn may read.
  std::vector<std::string> many;
  for (int i = 0; i < 300; ++i) many.push_back("many/" + std::to_string(i));
  for (int i = 0; i < 300; i += 150) a.set(many[static_cast<std::size_t>(i)], "x");
  CHECK_FALSE(a.check(many));
  for (const auto& k : many) a.set(k, k);
  CHECK(a.check(many));
  CHECK(a.multi_get(many).at(299) == "many/299");

  CHECK(a.delete_key("k"));
  CHECK_FALSE(a.delete_key("k"));
  CHECK_FALSE(a.try_get("k").has_value());

  const auto start = Clock::now();
  CHECK_THROWS_AS(a.get("missing", 300ms), StoreTimeout);
  CHECK(Clock::now() - start >= 300ms);
  auto o = quick();
  o.timeout = 300ms;
  auto c = etcd.client("job-a/", o);
  const auto what = error_of([&] { c.multi_get({"bin", "missing"}); });
  CHECK(contains(what, "timed out after 300 ms waiting for 'bin', 'missing'"));
  CHECK(a.local_address() == "127.0.0.1");
}

TEST_CASE("etcd: compare_set has torch's semantics in all four cases") {
  REQUIRE_ETCD();
  EtcdProcess etcd;
  auto c = etcd.client();
  // Missing, expected empty: created.
  CHECK(c.compare_set("a", "", "first") == "first");
  CHECK(c.try_get("a") == "first");
  // Missing, expected not empty: nothing written, expected returned.
  CHECK(c.compare_set("b", "x", "y") == "x");
  CHECK_FALSE(c.try_get("b").has_value());
  // Present and equal: swapped.
  CHECK(c.compare_set("a", "first", "second") == "second");
  CHECK(c.try_get("a") == "second");
  // Present and different: the current value, nothing written.
  CHECK(c.compare_set("a", "first", "third") == "second");
  CHECK(c.try_get("a") == "second");
  // Present and empty, expected empty: equal, so swapped (the nested txn).
  c.set("e", "");
  CHECK(c.compare_set("e", "", "filled") == "filled");
  CHECK(c.try_get("e") == "filled");
  // Present and not empty, expected empty: the current value.
  CHECK(c.compare_set("e", "", "again") == "filled");
}

TEST_CASE("etcd: add and append from two racing clients lose no update") {
  REQUIRE_ETCD();
  EtcdProcess etcd;
  constexpr int k_rounds = 60;
  std::atomic<int> failures{0};
  auto worker = [&](std::string tag) {
    try {
      auto c = etcd.client();
      for (int i = 0; i < k_rounds; ++i) {
        c.add("counter", 1);
        c.append("log", tag);
      }
    } catch (const StoreError& e) {
      ++failures;
      MESSAGE(e.what());
    }
  };
  std::thread t1(worker, "a");
  std::thread t2(worker, "b");
  t1.join();
  t2.join();
  CHECK(failures == 0);
  auto c = etcd.client();
  CHECK(c.add("counter", 0) == 2 * k_rounds);
  const auto log = c.get("log");
  CHECK(log.size() == 2 * k_rounds);
  CHECK(std::count(log.begin(), log.end(), 'a') == k_rounds);
  CHECK(c.add("counter", -2 * k_rounds - 5) == -5);
  CHECK(c.add("fresh", 7) == 7);
  c.set("word", "abc");
  CHECK(contains(error_of([&] { c.add("word", 1); }), "add on key 'word' whose value 'abc' is not a number"));
}

TEST_CASE("etcd: wait is woken by a later set, and returns false at its deadline") {
  REQUIRE_ETCD();
  EtcdProcess etcd;
  auto c = etcd.client();
  c.set("early", "1");
  std::thread setter([&] {
    auto s = etcd.client();
    std::this_thread::sleep_for(400ms);
    s.set("late1", "1");
    std::this_thread::sleep_for(200ms);
    s.set("late2", "2");
  });
  auto start = Clock::now();
  const bool ready = c.wait({"early", "late1", "late2", "late1"}, 20s);
  const auto took = Clock::now() - start;
  setter.join();
  CHECK(ready);
  CHECK(took >= 550ms);
  CHECK(took < 5s);
  CHECK(c.wait({"early", "late2"}, 0ms));

  start = Clock::now();
  CHECK_FALSE(c.wait({"early", "never"}, 500ms));
  CHECK(Clock::now() - start >= 500ms);
  CHECK(Clock::now() - start < 3s);
  CHECK_FALSE(c.wait({"never"}, 0ms));
  // The client stays usable after a wait that timed out.
  c.set("after", "x");
  CHECK(c.get("after") == "x");

  // get() waits the same way.
  std::thread later([&] {
    auto s = etcd.client();
    std::this_thread::sleep_for(300ms);
    s.set("got", "value");
  });
  CHECK(c.get("got", 10s) == "value");
  later.join();
}

TEST_CASE("etcd: create wins once (with a lease); list and watch_prefix see a prefix's keys and changes in order") {
  REQUIRE_ETCD();
  EtcdProcess etcd;
  auto a = etcd.client("job/");
  auto b = etcd.client("job/");
  auto other = etcd.client("other/");
  const auto lease = a.grant_lease(5s);
  CHECK(a.create("coordinator", "node-a", lease));
  CHECK_FALSE(b.create("coordinator", "node-b"));
  CHECK(b.try_get("coordinator") == "node-a");
  a.revoke(lease);  // the key goes with its lease: the next create wins
  CHECK(b.create("coordinator", "node-b"));

  a.set("join/x", "1");
  a.set("join/y", "2");
  a.set("joint", "not under join/");
  other.set("join/z", "another job's");
  std::int64_t revision = 0;
  const auto now = b.list("join/", revision);
  REQUIRE(now.size() == 2);
  CHECK(now[0] == std::pair<std::string, std::string>{"join/x", "1"});
  CHECK(now[1] == std::pair<std::string, std::string>{"join/y", "2"});
  CHECK(revision > 0);

  // Changes after the listing, from another thread; none from before it, none from elsewhere.
  std::thread writer([&] {
    auto w = etcd.client("job/");
    std::this_thread::sleep_for(100ms);
    other.set("join/q", "elsewhere");
    w.set("join/w", "3");
    w.set("joint", "changed");
    w.delete_key("join/x");
    w.set("join/y", "4");
  });
  std::vector<EtcdEvent> seen;
  const auto start_revision = revision;
  CHECK(b.watch_prefix("join/", revision, 10s, [&](const EtcdEvent& e) {
    seen.push_back(e);
    return seen.size() < 3;
  }));
  writer.join();
  REQUIRE(seen.size() == 3);
  CHECK(seen[0].key == "join/w");
  CHECK_FALSE(seen[0].deleted);
  CHECK(seen[0].value == "3");
  CHECK(seen[1].key == "join/x");
  CHECK(seen[1].deleted);
  CHECK(seen[2].key == "join/y");
  CHECK(seen[2].value == "4");
  CHECK(seen[0].revision > start_revision);
  CHECK(seen[1].revision > seen[0].revision);
  CHECK(revision == seen[2].revision);
  // Many answers at once: more pairs than one transaction takes, values past the byte bound.
  std::vector<std::pair<std::string, std::string>> many;
  for (int i = 0; i < 300; ++i)
    many.emplace_back("answer/" + std::to_string(i), std::string(i == 7 ? 600000 : 10, 'a'));
  a.set_many(many);
  std::int64_t at = 0;
  const auto answers = b.list("answer/", at);
  REQUIRE(answers.size() == 300);
  CHECK(b.try_get("answer/7")->size() == 600000);
  CHECK(b.try_get("answer/299") == "aaaaaaaaaa");
  // Nothing more: the watch ends at its deadline.
  const auto t0 = Clock::now();
  CHECK_FALSE(b.watch_prefix("join/", revision, 300ms, [&](const EtcdEvent&) { return true; }));
  CHECK(Clock::now() - t0 >= 300ms);
}

TEST_CASE("etcd: a key set under a lease that lapses is deleted, and wait_deleted sees it") {
  REQUIRE_ETCD();
  EtcdProcess etcd;
  auto c = etcd.client();
  const auto lease = c.grant_lease(1s);
  CHECK(lease != 0);
  c.set("leased", "node-1", lease);
  c.set("plain", "stays");
  CHECK(c.try_get("leased") == "node-1");
  CHECK_FALSE(c.wait_deleted("leased", 200ms));
  const auto start = Clock::now();
  CHECK(c.wait_deleted("leased", 15s));
  CHECK(Clock::now() - start < 10s);
  CHECK_FALSE(c.try_get("leased").has_value());
  CHECK(c.try_get("plain") == "stays");
  CHECK(c.wait_deleted("never-there", 0ms));
  CHECK(contains(error_of([&] { c.keep_alive(lease); }),
                 "lease " + std::to_string(lease) + " has lapsed or was revoked"));
  CHECK_THROWS_AS(c.set("again", "x", lease), StoreError);  // etcd: requested lease not found
}

TEST_CASE("etcd: keep_alive keeps a leased key alive; revoke deletes it") {
  REQUIRE_ETCD();
  EtcdProcess etcd;
  auto c = etcd.client();
  const auto lease = c.grant_lease(2s);
  c.set("alive", "yes", lease);
  const auto until = Clock::now() + 4500ms;  // more than twice the TTL
  while (Clock::now() < until) {
    c.keep_alive(lease);
    std::this_thread::sleep_for(400ms);
  }
  CHECK(c.try_get("alive") == "yes");
  c.revoke(lease);
  CHECK(c.wait_deleted("alive", 2s));
  CHECK_NOTHROW(c.revoke(lease));  // already gone: not an error
  CHECK_THROWS_AS(c.keep_alive(lease), StoreError);
}

TEST_CASE("etcd: interrupt() wakes a wait blocked in another thread at once") {
  REQUIRE_ETCD();
  EtcdProcess etcd;
  auto c = etcd.client();
  std::string error;
  std::atomic<bool> done{false};
  std::thread waiter([&] {
    error = error_of([&] { c.wait({"never"}, 60s); });
    done = true;
  });
  std::this_thread::sleep_for(500ms);
  CHECK_FALSE(done.load());
  const auto start = Clock::now();
  c.interrupt();
  waiter.join();
  CHECK(Clock::now() - start < 2s);
  CHECK(contains(error, "etcd at " + etcd.endpoint() + ": interrupted"));
  CHECK(contains(error_of([&] { c.set("k", "v"); }), "interrupted"));
}

TEST_CASE("etcd: the owner's cancel_fd ends a connect that is retrying a refused endpoint") {
  // No etcd needed: a port nothing listens on.
  const int probe = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(probe >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(probe, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  socklen_t len = sizeof a;
  ::getsockname(probe, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(probe);
  const int cancel = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  REQUIRE(cancel >= 0);
  EtcdOptions o;
  o.connect_timeout = 3s;  // longer than the test waits: the error must be the cancel's
  o.cancel_fd = cancel;
  std::string error;
  std::thread t([&] { error = error_of([&] { EtcdClient c("127.0.0.1", ntohs(a.sin_port), "/t/", o); }); });
  std::this_thread::sleep_for(200ms);
  const std::uint64_t one = 1;
  CHECK(::write(cancel, &one, sizeof one) == static_cast<ssize_t>(sizeof one));
  t.join();
  ::close(cancel);
  CHECK(error == "etcd at 127.0.0.1:" + std::to_string(ntohs(a.sin_port)) + ": interrupted");
}

TEST_CASE("etcd: a stopped etcd is a clear StoreError, also for a wait in progress") {
  REQUIRE_ETCD();
  std::optional<EtcdProcess> etcd(std::in_place);
  const auto port = etcd->port();
  auto o = quick();
  o.connect_timeout = 300ms;
  auto c = etcd->client("test/", o);
  auto watcher = etcd->client("test/", o);
  c.set("k", "v");
  std::string wait_error;
  std::thread waiter([&] { wait_error = error_of([&] { (void)watcher.wait({"never"}, 60s); }); });
  std::this_thread::sleep_for(500ms);
  const auto start = Clock::now();
  etcd.reset();  // SIGTERM, waited for
  waiter.join();
  CHECK(Clock::now() - start < 10s);
  MESSAGE("a wait when etcd stopped: " << wait_error);
  // etcd ends the stream with {"error":{"grpc_code":14,...,"message":"transport is closing"}}, or
  // the connection just closes.
  CHECK(contains(wait_error, "etcd at 127.0.0.1:" + std::to_string(port) + ": POST /v3/watch: "));

  const auto what = error_of([&] { c.set("k", "v2"); });
  CHECK(contains(what, "cannot reach etcd at 127.0.0.1:" + std::to_string(port) + ": Connection refused"));
  const auto fresh = error_of([&] { EtcdClient("127.0.0.1", port, "test/", o); });
  CHECK(contains(fresh, "cannot reach etcd at 127.0.0.1:" + std::to_string(port) + ": Connection refused"));
}

namespace {

// SIGSTOP of `pid` for `duration`, SIGCONT after it (on a thread of its own); the destructor
// waits for the SIGCONT.
class Paused {
 public:
  Paused(pid_t pid, std::chrono::milliseconds duration) : m_pid(pid) {
    REQUIRE(::kill(pid, SIGSTOP) == 0);
    m_resume = std::thread([pid, duration] {
      std::this_thread::sleep_for(duration);
      ::kill(pid, SIGCONT);
    });
  }
  ~Paused() {
    m_resume.join();
    ::kill(m_pid, SIGCONT);
  }
  Paused(const Paused&) = delete;
  Paused& operator=(const Paused&) = delete;

 private:
  pid_t m_pid;
  std::thread m_resume;
};

}  // namespace

TEST_CASE("etcd: a reply late from an etcd that has the request is awaited for the patience, then given up") {
  REQUIRE_ETCD();
  EtcdProcess etcd;
  auto o = quick();
  o.timeout = 200ms;
  o.patience = 5s;
  std::vector<std::chrono::milliseconds> slow;
  o.on_slow_reply = [&](std::chrono::milliseconds waited) { slow.push_back(waited); };
  auto patient = etcd.client("test/", o);
  o.patience = 600ms;
  auto less = etcd.client("test/", o);
  o.patience = 0ms;
  o.on_slow_reply = nullptr;
  auto impatient = etcd.client("test/", o);
  for (auto* c : {&patient, &less, &impatient}) c->set("k", "0");  // each connected

  {
    const Paused paused(etcd.pid(), 1000ms);  // past `timeout` five times over, within the patience
    patient.set("k", "1");
  }
  REQUIRE(slow.size() >= 3);
  CHECK(slow.front() >= 200ms);
  CHECK(slow.back() < 5s);
  {
    const Paused paused(etcd.pid(), 1000ms);
    const auto start = Clock::now();
    try {
      impatient.set("k", "2");
      FAIL("a reply came from a stopped etcd");
    } catch (const StoreError& e) {
      CHECK(e.kind() == StoreFailure::NoReply);
      CHECK(e.detail() == "POST /v3/kv/put: no reply within 200 ms");
    }
    CHECK(Clock::now() - start < 900ms);
  }
  {
    const Paused paused(etcd.pid(), 1500ms);
    CHECK(contains(error_of([&] { less.set("k", "3"); }), "kept acknowledging (etcd is stopped or overloaded)"));
  }
  CHECK(patient.try_get("k").has_value());  // etcd answers again, and the patient client's connection is fine
}

TEST_CASE("etcd: IPv6 endpoint") {
  REQUIRE_ETCD();
  EtcdProcess etcd(true);
  auto c = etcd.client();
  c.set("six", "::1");
  CHECK(c.get("six") == "::1");
  CHECK(c.local_address() == "::1");
  std::thread setter([&] {
    auto s = etcd.client();
    std::this_thread::sleep_for(200ms);
    s.set("later", "x");
  });
  CHECK(c.wait({"later"}, 10s));
  setter.join();
}

// --- against a fake server: what a broken or hostile HTTP peer gets ----------------------------

namespace {

// Accepts connections on 127.0.0.1 and answers each request, on whichever connection it comes,
// with the next canned response (the last one repeats); an empty response means: read the
// request and say nothing. A response given as pieces is sent a piece at a time, `pause` apart.
class FakeServer {
 public:
  using Pieces = std::vector<std::string>;
  explicit FakeServer(const std::vector<std::string>& responses) : FakeServer(whole(responses), 0ms) {}
  FakeServer(std::vector<Pieces> responses, std::chrono::milliseconds pause)
      : m_responses(std::move(responses)), m_pause(pause) {
    m_fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(m_fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
    socklen_t len = sizeof(addr);
    REQUIRE(::getsockname(m_fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
    m_port = ntohs(addr.sin_port);
    REQUIRE(::listen(m_fd, 8) == 0);
    m_thread = std::thread([this] { serve(); });
  }
  ~FakeServer() {
    m_stop = true;
    m_thread.join();
    ::close(m_fd);
  }
  FakeServer(const FakeServer&) = delete;
  FakeServer& operator=(const FakeServer&) = delete;
  std::uint16_t port() const { return m_port; }
  int connections() const { return m_connections; }

 private:
  struct Peer {
    int fd;
    std::string in;
  };
  std::vector<Pieces> m_responses;
  std::chrono::milliseconds m_pause;
  int m_fd = -1;
  std::uint16_t m_port = 0;
  std::atomic<bool> m_stop{false};
  std::atomic<int> m_connections{0};
  std::size_t m_next = 0;
  std::thread m_thread;

  static std::vector<Pieces> whole(const std::vector<std::string>& responses) {
    std::vector<Pieces> out;
    for (const auto& response : responses) out.push_back({response});
    return out;
  }

  void answer(int fd) {
    const auto& pieces = m_responses[std::min(m_next++, m_responses.size() - 1)];
    for (std::size_t i = 0; i < pieces.size() && !m_stop; ++i) {
      if (i > 0) std::this_thread::sleep_for(m_pause);
      if (!pieces[i].empty() && ::send(fd, pieces[i].data(), pieces[i].size(), MSG_NOSIGNAL) < 0) return;
    }
  }

  // Answers every request in `peer.in` that is complete (our client sends a Content-Length body).
  void serve_requests(Peer& peer) {
    for (;;) {
      const auto head_end = peer.in.find("\r\n\r\n");
      if (head_end == std::string::npos) return;
      const auto cl = peer.in.find("Content-Length: ");
      const auto body = static_cast<std::size_t>(std::stoul(peer.in.substr(cl + 16)));
      if (peer.in.size() < head_end + 4 + body) return;
      peer.in.erase(0, head_end + 4 + body);
      answer(peer.fd);
    }
  }

  void serve() {
    std::vector<Peer> peers;
    while (!m_stop) {
      std::vector<pollfd> fds{{m_fd, POLLIN, 0}};
      for (const auto& peer : peers) fds.push_back({peer.fd, POLLIN, 0});
      if (::poll(fds.data(), fds.size(), 50) <= 0) continue;
      for (std::size_t i = peers.size(); i-- > 0;) {
        if (fds[i + 1].revents == 0) continue;
        char buf[4096];
        const ssize_t n = ::recv(peers[i].fd, buf, sizeof(buf), 0);
        if (n <= 0) {
          ::close(peers[i].fd);
          peers.erase(peers.begin() + static_cast<std::ptrdiff_t>(i));
          continue;
        }
        peers[i].in.append(buf, static_cast<std::size_t>(n));
        serve_requests(peers[i]);
      }
      if ((fds[0].revents & POLLIN) != 0) {
        const int conn = ::accept4(m_fd, nullptr, nullptr, SOCK_CLOEXEC);
        if (conn < 0) continue;
        const int one = 1;
        ::setsockopt(conn, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));  // each piece on its own
        ++m_connections;
        peers.push_back({conn, {}});
      }
    }
    for (const auto& peer : peers) ::close(peer.fd);
  }
};

std::string reply(std::string_view body) {
  return "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\n\r\n" + std::string(body);
}

const std::string k_put_ok = reply(R"({"header":{"revision":"2"}})");

}  // namespace

TEST_CASE("etcd client: malformed replies throw StoreError and the next call reconnects") {
  FakeServer server({reply("not json"), k_put_ok, reply(R"({"kvs":5})"),
                     reply(R"({"header":{"revision":"3"},"kvs":[{"key":"cC9r","mod_revision":"3","value":"dg=="}]})")});
  EtcdClient c("127.0.0.1", server.port(), "p/", quick());
  const auto what = error_of([&] { c.set("k", "v"); });
  CHECK(contains(
      what, "etcd at 127.0.0.1:" + std::to_string(server.port()) + ": POST /v3/kv/put: malformed reply: 'not json'"));
  CHECK_NOTHROW(c.set("k", "v"));
  CHECK(server.connections() == 2);
  CHECK(contains(error_of([&] { c.try_get("k"); }), "POST /v3/kv/range: malformed reply: not in the shape etcd sends"));
  CHECK(c.try_get("k") == "v");
  CHECK(server.connections() == 3);
}

TEST_CASE("etcd client: bounded bodies, headers and chunks; garbage status lines") {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"HTTP/1.1 200 OK\r\nContent-Length: 104857600\r\n\r\n", "response body of 104857600 bytes"},
      {"HTTP/1.1 200 OK\r\n" + std::string(70000, 'X') + "\r\n\r\n", "line of the response over"},
      {"HTTP/1.1 200 OK\r\n" +
           [] {
             std::string h;
             for (int i = 0; i < 2000; ++i) h += "X-Filler: " + std::string(30, 'y') + "\r\n";
             return h;
           }() +
           "\r\n",
       "response headers over 65536 bytes"},
      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n800000\r\n", "response body over 4194304 bytes"},
      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "malformed chunk size 'zz'"},
      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", "unsupported Transfer-Encoding 'gzip'"},
      {"SSH-2.0-OpenSSH_9.2\r\n", "malformed status line 'SSH-2.0-OpenSSH_9.2'"},
      {"HTTP/1.1 2x0 OK\r\n\r\n", "malformed status line 'HTTP/1.1 2x0 OK' (bad status)"},
      {"HTTP/2.0 200 OK\r\n\r\n", "malformed status line 'HTTP/2.0 200 OK' (bad version)"},
      {"HTTP/1.1 100 Continue\r\n\r\n", "unexpected HTTP status 100"},
      {"HTTP/1.1 200 OK\r\nX-Long: " + std::string(10000, 'x') + "\r\n\r\n", "line of the response over 8192 bytes"},
      {"HTTP/1.1 200 OK\r\nContent-Length: 12abc\r\n\r\n", "malformed Content-Length"},
      {"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}", "malformed Content-Length"},
      {"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n{}",
       "response with neither Content-Length nor chunked encoding"},
      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}XY\r\n0\r\n\r\n",
       "malformed chunk: no CRLF after its data"},
      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\nzz\r\n", "malformed chunk size 'zz'"},
      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + std::string(70000, '1'),
       "chunk size line or trailers over 65536 bytes"},
      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n" +
           [] {
             std::string trailers;
             for (int i = 0; i < 2000; ++i) trailers += "X-Trailer: " + std::string(30, 'y') + "\r\n";
             return trailers;
           }(),
       "chunk size line or trailers over 65536 bytes"},
      // Every chunk under the bound, the body over it.
      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" +
           [] {
             std::string body;
             for (int i = 0; i < 5; ++i) body += "100000\r\n" + std::string(std::size_t{1} << 20, ' ') + "\r\n";
             return body;
           }(),
       "response body over 4194304 bytes"},
      {"HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\nContent-Length: 10\r\n\r\nNot Found\n",
       "HTTP 404: Not Found"},
      {"HTTP/1.1 400 Bad Request\r\nContent-Length: 104\r\n\r\n"
       R"({"error":"illegal base64 data at input byte 0","message":"illegal base64 data at input byte 0","code":3})",
       "illegal base64 data at input byte 0 (HTTP 400, gRPC code 3)"},
  };
  for (const auto& [response, expected] : cases) {
    CAPTURE(expected);
    FakeServer server({response});
    EtcdClient c("127.0.0.1", server.port(), "p/", quick());
    CHECK(contains(error_of([&] { c.set("k", "v"); }), expected));
  }
}

TEST_CASE("etcd client: a chunked reply with trailers is read, and the connection kept") {
  const std::string body = R"({"header":{"revision":"2"}})";
  char size[16];
  std::snprintf(size, sizeof(size), "%zx", body.size());
  const std::string chunked = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + std::string(size) +
                              ";ext=1\r\n" + body + "\r\n0\r\nGrpc-Trailer-Content-Type: application/grpc\r\n\r\n";
  FakeServer server({chunked, chunked, k_put_ok});
  EtcdClient c("127.0.0.1", server.port(), "p/", quick());
  c.set("a", "1");
  c.set("b", "2");
  c.set("c", "3");
  CHECK(server.connections() == 1);
}

TEST_CASE("etcd client: a server that never answers fails the call after options.timeout") {
  FakeServer server({""});
  auto o = quick();
  o.timeout = 300ms;
  EtcdClient c("127.0.0.1", server.port(), "p/", o);
  const auto start = Clock::now();
  CHECK(contains(error_of([&] { c.set("k", "v"); }), "POST /v3/kv/put: no reply within 300 ms"));
  CHECK(Clock::now() - start >= 300ms);
  CHECK(Clock::now() - start < 3s);
}

namespace {

// `text` a byte at a time.
FakeServer::Pieces bytewise(const std::string& text) {
  FakeServer::Pieces out;
  for (char b : text) out.emplace_back(1, b);
  return out;
}

std::string hex(std::size_t n) {
  char text[32];
  std::snprintf(text, sizeof(text), "%zx", n);
  return text;
}

// A chunked reply as the gateway sends one: `chunks` (each non-empty), the last chunk, trailers.
std::string chunked_reply(const std::vector<std::string>& chunks, std::string_view trailers = "") {
  std::string out = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (const auto& chunk : chunks) out += hex(chunk.size()) + "\r\n" + chunk + "\r\n";
  return out + "0\r\n" + std::string(trailers) + "\r\n";
}

// `lines` header lines of 42 bytes each, then an empty JSON body.
std::string padded_reply(int lines) {
  std::string out = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n";
  for (int i = 0; i < lines; ++i) out += "X-Filler: " + std::string(30, 'y') + "\r\n";
  return out + "\r\n{}";
}

// `text` in pieces of `size` bytes.
FakeServer::Pieces pieces_of(const std::string& text, std::size_t size) {
  FakeServer::Pieces out;
  for (std::size_t at = 0; at < text.size(); at += size) out.push_back(text.substr(at, size));
  return out;
}

}  // namespace

TEST_CASE("etcd client: a reply split at every byte boundary, or sent a byte at a time, is read whole") {
  // The key "p/k" with the value "v", at revision 3, in three chunks with a trailer.
  const std::string range = chunked_reply(
      {R"({"header":{"revision":"3"},)", R"("kvs":[{"key":"cC9r","mod_revision":"3",)", R"("value":"dg=="}]})"},
      "Grpc-Trailer-Content-Type: application/grpc\r\n");
  const std::string plain =
      reply(R"({"header":{"revision":"3"},"kvs":[{"key":"cC9r","mod_revision":"3","value":"dg=="}]})");
  std::vector<FakeServer::Pieces> responses;
  for (const auto* text : {&range, &plain}) {
    for (std::size_t at = 1; at < text->size(); ++at) responses.push_back({text->substr(0, at), text->substr(at)});
    responses.push_back(bytewise(*text));
  }
  FakeServer server(responses, 1ms);
  EtcdClient c("127.0.0.1", server.port(), "p/", quick());
  for (std::size_t i = 0; i < responses.size(); ++i) {
    CAPTURE(i);
    REQUIRE(c.try_get("k") == "v");
  }
  CHECK(server.connections() == 1);  // every reply read to its end: the connection kept
}

TEST_CASE("etcd client: a peer that is not an HTTP server fails at its first line, even a byte at a time") {
  FakeServer server({bytewise("SSH-2.0-OpenSSH_9.2\r\n")}, 5ms);
  auto o = quick();
  o.timeout = 5s;
  EtcdClient c("127.0.0.1", server.port(), "p/", o);
  const auto start = Clock::now();
  CHECK(contains(error_of([&] { c.set("k", "v"); }), "malformed status line 'SSH-2.0-OpenSSH_9.2' (bad version)"));
  CHECK(Clock::now() - start < 2s);  // not at the timeout, waiting for a header that never ends
}

TEST_CASE("etcd client: the header bound holds however the header arrives") {
  // 84,000 bytes of header, in pieces of several sizes: Beast's own limit counts only what one
  // call to its parser sees.
  for (const std::size_t piece : {std::size_t{1000}, std::size_t{4000}, std::size_t{70000}}) {
    CAPTURE(piece);
    FakeServer server({pieces_of(padded_reply(2000), piece)}, 1ms);
    EtcdClient c("127.0.0.1", server.port(), "p/", quick());
    CHECK(contains(error_of([&] { c.set("k", "v"); }), "response headers over 65536 bytes"));
  }
  // Just under the bound: read.
  FakeServer server({pieces_of(padded_reply(1500), 4000)}, 1ms);
  EtcdClient c("127.0.0.1", server.port(), "p/", quick());
  CHECK_NOTHROW(c.set("k", "v"));
}

TEST_CASE("etcd client: a watch delivers each event as its chunk arrives, not at the end of the stream") {
  const auto event = [](int revision, std::string_view key, std::string_view value) {
    const auto rev = std::to_string(revision);
    return R"({"result":{"header":{"revision":")" + rev + R"("},"events":[{"kv":{"key":")" + std::string(key) +
           R"(","mod_revision":")" + rev + R"(","value":")" + std::string(value) + R"("}}]}})";
  };
  const std::string created = R"({"result":{"header":{"revision":"4"},"created":true}})";
  const std::string b = event(6, "cC9qb2luL2I=", "Mg==");  // split across two chunks
  const auto chunk = [](const std::string& data) { return hex(data.size()) + "\r\n" + data + "\r\n"; };
  FakeServer server(
      {{"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n" + chunk(created),
        chunk(event(5, "cC9qb2luL2E=", "MQ==")), chunk(b.substr(0, 40)),
        chunk(b.substr(40)) + chunk(event(7, "cC9qb2luL2M=", "Mw==") + "\n" + event(8, "cC9qb2luL2Q=", "NA==")),
        "0\r\n\r\n"}},
      400ms);
  EtcdClient c("127.0.0.1", server.port(), "p/", quick());
  std::vector<std::pair<std::string, Clock::time_point>> seen;
  std::int64_t revision = 4;
  const auto start = Clock::now();
  const auto what = error_of([&] {
    c.watch_prefix("join/", revision, 20s, [&](const EtcdEvent& e) {
      seen.emplace_back(e.key + "=" + e.value, Clock::now());
      return true;
    });
  });
  CHECK(contains(what, "POST /v3/watch: etcd ended the watch stream"));
  REQUIRE(seen.size() == 4);
  CHECK(seen[0].first == "join/a=1");
  CHECK(seen[1].first == "join/b=2");
  CHECK(seen[2].first == "join/c=3");
  CHECK(seen[3].first == "join/d=4");
  CHECK(revision == 8);
  // Pieces go out 400 ms apart: the first event comes with the second piece, the one split in
  // two with the fourth, the two messages of one chunk together.
  CHECK(seen[0].second - start < 700ms);
  CHECK(seen[1].second - seen[0].second >= 700ms);
  CHECK(seen[2].second - seen[1].second < 200ms);
  CHECK(seen[3].second - seen[2].second < 200ms);
}

TEST_CASE("etcd client: a watch message is bounded, the stream is not") {
  // A message that never ends: three chunks of 1 MiB, then one that would take it past 4 MiB.
  const std::string head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";
  const std::string open = R"({"result":{"x":")";
  std::string stream = head + "100000\r\n" + open + std::string((std::size_t{1} << 20) - open.size(), 'a') + "\r\n";
  for (int i = 0; i < 2; ++i) stream += "100000\r\n" + std::string(std::size_t{1} << 20, 'a') + "\r\n";
  stream += "180000\r\n" + std::string(std::size_t{3} << 19, 'a') + "\r\n";
  FakeServer server({stream});
  EtcdClient c("127.0.0.1", server.port(), "p/", quick());
  std::int64_t revision = 0;
  CHECK(contains(error_of([&] { c.watch_prefix("join/", revision, 20s, [](const EtcdEvent&) { return true; }); }),
                 "POST /v3/watch: watch message over 4194304 bytes"));

  // Many messages, more than the bound in all: each read on its own.
  std::string many = head;
  const std::string filler = R"({"result":{"header":{"revision":"1"},"x":")" + std::string(500000, 'a') + R"("}})";
  for (int i = 0; i < 12; ++i) many += hex(filler.size()) + "\r\n" + filler + "\r\n";
  const std::string last =
      R"({"result":{"header":{"revision":"9"},"events":[{"kv":{"key":"cC9qb2luL2E=","mod_revision":"9","value":"MQ=="}}]}})";
  many += hex(last.size()) + "\r\n" + last + "\r\n";
  FakeServer long_stream({many});
  EtcdClient d("127.0.0.1", long_stream.port(), "p/", quick());
  CHECK(d.watch_prefix("join/", revision, 20s, [](const EtcdEvent& e) { return e.key != "join/a"; }));
  CHECK(revision == 9);
}
