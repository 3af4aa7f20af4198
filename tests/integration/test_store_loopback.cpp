// A real StoreServer on 127.0.0.1:0 with its own io_context thread, driven by StoreClients and
// raw sockets at once: concurrency, stalled and hostile clients, observers, key spaces, reset,
// port owners, and rankrun-store's own errors.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <chrono>
#include <doctest/doctest.h>
#include <functional>
#include <cstdio>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "rendezvous/job_secret.hpp"
#include "rendezvous/key_space_auth.hpp"
#include "rendezvous/port_owner.hpp"
#include "rendezvous/store_client.hpp"
#include "rendezvous/store_server.hpp"
#include "rendezvous/wire.hpp"
#include "tests/unit/skip.hpp"

using namespace rankrun::rendezvous;
using namespace std::chrono_literals;

namespace {

// The server runs on its own thread; the test touches it only through on_io().
class ServerThread {
 public:
  explicit ServerThread(ServerOptions options = {}, StoreObserver* observer = nullptr)
      : m_server(std::in_place, m_io, std::move(options), observer), m_thread([this] { m_io.run(); }) {}
  ~ServerThread() {
    on_io([this] { m_server.reset(); });
    m_guard.reset();
    m_thread.join();
  }
  std::uint16_t port() const { return m_port; }

  template <typename F>
  auto on_io(F f) -> decltype(f()) {
    std::packaged_task<decltype(f())()> task(std::move(f));
    auto result = task.get_future();
    boost::asio::post(m_io, [&task] { task(); });
    return result.get();
  }
  StoreServer& server() { return *m_server; }
  // The server's thread does nothing else for `d` (a store busy or stopped; the kernel still
  // accepts and acknowledges what clients send).
  void block_for(std::chrono::milliseconds d) {
    boost::asio::post(m_io, [d] { std::this_thread::sleep_for(d); });
  }

 private:
  boost::asio::io_context m_io{1};
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> m_guard{
      boost::asio::make_work_guard(m_io)};
  std::optional<StoreServer> m_server;
  std::uint16_t m_port = m_server->port();
  std::thread m_thread;
};

// A client that writes whatever bytes it likes.
class RawSocket {
 public:
  explicit RawSocket(std::uint16_t port) {
    m_fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(m_fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
    const int one = 1;
    ::setsockopt(m_fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  ~RawSocket() {
    if (m_fd >= 0) ::close(m_fd);
  }
  RawSocket(const RawSocket&) = delete;
  RawSocket& operator=(const RawSocket&) = delete;

  void send(std::string_view bytes) {
    REQUIRE(::send(m_fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size()));
  }
  // Up to `n` bytes within `timeout`; fewer means the peer closed or time ran out.
  std::string recv(std::size_t n, std::chrono::milliseconds timeout = 5s) {
    std::string out;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (out.size() < n) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      pollfd p{m_fd, POLLIN, 0};
      if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
      char buf[4096];
      const ssize_t got = ::recv(m_fd, buf, std::min(sizeof(buf), n - out.size()), 0);
      if (got <= 0) {
        m_closed = true;
        break;
      }
      out.append(buf, static_cast<std::size_t>(got));
    }
    return out;
  }
  // True when the server closed the connection within `timeout`.
  bool closed_by_peer(std::chrono::milliseconds timeout = 5s) {
    recv(1 << 20, timeout);
    return m_closed;
  }
  // Nothing arrives (and the connection stays open) for `quiet`.
  bool silent_for(std::chrono::milliseconds quiet) { return recv(1, quiet).empty() && !m_closed; }
  int fd() const { return m_fd; }

 private:
  int m_fd = -1;
  bool m_closed = false;
};

std::string frame(Op op, std::vector<std::string> keys = {}, std::vector<std::string> values = {},
                  std::int64_t number = 0, Generation g = Generation::V2_2) {
  Request r;
  r.op = op;
  r.keys = std::move(keys);
  r.values = std::move(values);
  r.number = number;
  std::string out;
  REQUIRE(encode_request(r, g, out));
  return out;
}

std::string validate() { return frame(Op::Validate, {}, {}, k_validation_magic); }

std::string le64(std::uint64_t v) {
  std::string s;
  append_i64(s, static_cast<std::int64_t>(v));
  return s;
}

ClientOptions quick() {
  ClientOptions o;
  o.connect_timeout = 5s;
  o.timeout = 10s;
  return o;
}

struct RecordingObserver : StoreObserver {
  std::mutex mutex;
  std::vector<std::string> events;
  std::string peer_ip;
  std::uint16_t peer_port = 0;
  void on_open(std::uint64_t conn, const std::string& ip, std::uint16_t port, std::uint16_t) override {
    std::lock_guard lock(mutex);
    events.push_back("open " + std::to_string(conn));
    peer_ip = ip;
    peer_port = port;
  }
  void on_join(std::uint64_t conn, KeySpaceId space, std::string_view name) override {
    std::lock_guard lock(mutex);
    events.push_back("join " + std::to_string(conn) + " " + std::to_string(space) + " " + std::string(name));
  }
  void on_close(std::uint64_t conn) override {
    std::lock_guard lock(mutex);
    events.push_back("close " + std::to_string(conn));
  }
  void on_request(std::uint64_t conn, Op op, std::string_view key) override {
    std::lock_guard lock(mutex);
    events.push_back(std::to_string(conn) + " " + std::string(op_name(op)) + " " + std::string(key));
  }
  std::vector<std::string> snapshot() {
    std::lock_guard lock(mutex);
    return events;
  }
};

template <typename F>
bool eventually(F condition, std::chrono::milliseconds timeout = 5s) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(5ms);
  }
  return condition();
}

}  // namespace

TEST_CASE("loopback: many concurrent clients set, add and get without losing an update") {
  ServerThread st;
  constexpr int k_threads = 16;
  constexpr int k_ops = 200;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < k_threads; ++t) {
    threads.emplace_back([&, t] {
      try {
        StoreClient c("127.0.0.1", st.port(), quick());
        for (int i = 0; i < k_ops; ++i) {
          const auto key = "/t" + std::to_string(t) + "/" + std::to_string(i);
          c.set(key, std::to_string(i));
          c.add("/total", 1);
          if (c.get(key) != std::to_string(i)) ++failures;
        }
      } catch (const std::exception& e) {
        MESSAGE(e.what());
        ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  CHECK(failures == 0);
  StoreClient c("127.0.0.1", st.port(), quick());
  CHECK(c.add("/total", 0) == k_threads * k_ops);
  CHECK(c.num_keys() == k_threads * k_ops + 1);
}

TEST_CASE("loopback: a barrier of 64 clients (ADD then WAIT on a key the last one sets)") {
  ServerThread st;
  constexpr int k_clients = 64;
  std::vector<std::thread> threads;
  std::atomic<int> released{0};
  for (int i = 0; i < k_clients; ++i) {
    threads.emplace_back([&] {
      StoreClient c("127.0.0.1", st.port(), quick());
      if (c.add("/arrived", 1) == k_clients) c.set("/go", "1");
      if (c.wait({"/go"}, 10s)) ++released;
    });
  }
  for (auto& t : threads) t.join();
  CHECK(released == k_clients);
}

TEST_CASE("loopback: a client that sends half a frame and stalls does not hold up the others") {
  ServerThread st;
  RawSocket stalled(st.port());
  const std::string set_frame = frame(Op::Set, {"/stalled"}, {std::string(1000, 'x')});
  stalled.send(validate() + set_frame.substr(0, set_frame.size() / 2));

  StoreClient other("127.0.0.1", st.port(), quick());
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 100; ++i) other.add("/n", 1);
  CHECK(other.get("/n") == "100");
  CHECK(std::chrono::steady_clock::now() - start < 2s);
  CHECK_FALSE(other.check({"/stalled"}));

  // The half frame was kept: the rest completes it.
  stalled.send(set_frame.substr(set_frame.size() / 2));
  CHECK(other.get("/stalled", 5s) == std::string(1000, 'x'));
}

TEST_CASE("loopback: a request still partial at the frame deadline closes its connection only") {
  ServerOptions options;
  options.limits.frame_deadline_ms = 300;
  ServerThread st(options);
  const std::string set_frame = frame(Op::Set, {"/slow"}, {std::string(1000, 'x')});
  RawSocket trickle(st.port());
  trickle.send(validate() + set_frame.substr(0, 10));
  // A sender that keeps the frame partial (a byte now and then) is closed once the deadline
  // passes, counted from the frame's first byte, not from its last.
  for (std::size_t i = 10; i < 16; ++i) {
    std::this_thread::sleep_for(80ms);
    (void)::send(trickle.fd(), set_frame.data() + i, 1, MSG_NOSIGNAL);  // fails once closed
  }
  CHECK(trickle.closed_by_peer());
  // Whole requests, however many, are not timed.
  StoreClient other("127.0.0.1", st.port(), quick());
  other.set("/k", "v");
  std::this_thread::sleep_for(500ms);
  CHECK(other.get("/k") == "v");
  CHECK_FALSE(other.check({"/slow"}));
}

TEST_CASE("loopback: a 4 GB length prefix closes that connection only, without allocating") {
  ServerThread st;
  StoreClient other("127.0.0.1", st.port(), quick());
  other.set("/before", "1");
  RawSocket evil(st.port());
  evil.send(validate() + std::string(1, '\x01') + le64(4ull << 30));
  CHECK(evil.closed_by_peer());
  // A 1.13-table client doing the same.
  RawSocket evil_legacy(st.port());
  evil_legacy.send(std::string(1, '\x00') + le64(0xFFFFFFFFFFull));
  CHECK(evil_legacy.closed_by_peer());
  CHECK(other.get("/before") == "1");
  other.set("/after", "2");
  CHECK(other.get("/after") == "2");
  CHECK(eventually([&] { return st.on_io([&] { return st.server().connection_count(); }) == 1; }));
}

TEST_CASE("loopback: garbage closes only that connection") {
  ServerThread st;
  StoreClient other("127.0.0.1", st.port(), quick());
  other.set("/k", "v");
  RawSocket http(st.port());
  http.send("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
  CHECK(http.closed_by_peer());
  RawSocket bad_magic(st.port());
  bad_magic.send(std::string("\x00\xCE\xF7\x85\x3C", 5) + std::string(1, '\x00') + "\x01\x02\x03\x04");
  CHECK(bad_magic.closed_by_peer());
  RawSocket unknown(st.port());
  unknown.send(validate() + std::string(1, '\x13'));  // 19: past BARRIER
  CHECK(unknown.closed_by_peer());
  RawSocket add_text(st.port());
  add_text.send(validate() + frame(Op::Add, {"/k"}, {}, 1));  // "/k" holds "v"
  CHECK(add_text.closed_by_peer());
  CHECK(other.get("/k") == "v");
  CHECK(other.num_keys() == 1);
}

TEST_CASE("loopback: a 1.13 client (no handshake, second idle connection) is served") {
  ServerThread st;
  ClientOptions legacy = quick();
  legacy.protocol = ClientProtocol::V1_13;
  StoreClient c("127.0.0.1", st.port(), legacy);
  RawSocket idle_callback_connection(st.port());
  CHECK(c.add("init/", 1) == 1);
  c.set("/a", "1");
  CHECK(c.get("/a") == "1");
  CHECK(c.compare_set("/a", "1", "2") == "2");
  CHECK(c.delete_key("/a"));
  CHECK(c.multi_get({"init/"}) == std::vector<std::string>{"1"});
  CHECK(idle_callback_connection.silent_for(50ms));
  // Raw 1.13 WATCH_KEY on the callback connection.
  idle_callback_connection.send(frame(Op::WatchKey, {"/a"}, {}, 0, Generation::V1_13));
  CHECK(idle_callback_connection.recv(1) == std::string(1, '\x03'));
}

TEST_CASE("loopback: 2.1 clients need --store-protocol=2.1 (their first bytes look like 1.13's)") {
  ServerOptions options;
  options.protocol = ProtocolChoice::V2_1;
  ServerThread st(options);
  ClientOptions v21 = quick();
  v21.protocol = ClientProtocol::V2_1;
  StoreClient c21("127.0.0.1", st.port(), v21);
  c21.append("/log", "a");
  CHECK(c21.get("/log") == "a");
  CHECK_FALSE(c21.wait({"/never"}, 50ms));  // 2.1 has CANCEL_WAIT
  c21.ping();
  // Newest clients are still recognised by their VALIDATE.
  StoreClient newest("127.0.0.1", st.port(), quick());
  CHECK(newest.get("/log") == "a");
}

TEST_CASE("loopback: a wait that times out is cancelled and the connection stays usable") {
  ServerThread st;
  StoreClient c("127.0.0.1", st.port(), quick());
  const auto start = std::chrono::steady_clock::now();
  CHECK_FALSE(c.wait({"/never"}, 100ms));
  CHECK(std::chrono::steady_clock::now() - start >= 100ms);
  CHECK_THROWS_AS(c.get("/never", 50ms), StoreTimeout);
  CHECK(eventually([&] { return st.on_io([&] { return st.server().state().pending_waits(); }) == 0; }));
  // Setting the key now must not leave a stray STOP_WAITING on this connection.
  c.set("/never", "now");
  CHECK(c.add("/x", 5) == 5);
  CHECK(c.get("/never") == "now");
  c.ping();
}

namespace {

// The StoreError `call` throws (it must throw one).
StoreError error_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const StoreError& e) {
    return e;
  }
  FAIL("no StoreError");
  return StoreError("none");
}

}  // namespace

TEST_CASE("loopback: a reply late from a server that has the request is awaited for the patience, then given up") {
  ServerThread st;
  auto options = quick();
  options.timeout = 200ms;
  options.patience = 5s;
  std::vector<std::chrono::milliseconds> slow;
  options.on_slow_reply = [&](std::chrono::milliseconds waited) { slow.push_back(waited); };
  StoreClient patient("127.0.0.1", st.port(), options);
  options.patience = 600ms;
  StoreClient less("127.0.0.1", st.port(), options);
  options.patience = 0ms;
  options.on_slow_reply = nullptr;
  StoreClient impatient("127.0.0.1", st.port(), options);

  // Busy for 1 s: past `timeout` five times over, within the patience.
  st.block_for(1000ms);
  CHECK(patient.add("/n", 1) == 1);
  REQUIRE(slow.size() >= 3);
  CHECK(slow.front() >= 200ms);
  CHECK(slow.back() < 5s);

  st.block_for(1000ms);
  const auto start = std::chrono::steady_clock::now();
  const auto late = error_of([&] { (void)impatient.add("/n", 1); });
  CHECK(late.kind() == StoreFailure::NoReply);
  CHECK(late.stage() == StoreStage::Request);
  CHECK(late.detail() == "ADD: no reply within 200 ms");
  CHECK(std::chrono::steady_clock::now() - start < 900ms);
  std::this_thread::sleep_for(1000ms);

  st.block_for(1500ms);
  CHECK_THROWS_WITH_AS(less.add("/n", 1), doctest::Contains("kept acknowledging"), StoreError);
  std::this_thread::sleep_for(1500ms);
  CHECK(patient.add("/n", 0) >= 1);  // the server answers again, and the patient client's connection is fine
}

TEST_CASE("loopback: CANCEL_WAIT after the key arrived answers STOP_WAITING then WAIT_CANCELED") {
  ServerThread st;
  RawSocket waiter(st.port());
  waiter.send(validate() + frame(Op::Wait, {"/k"}));
  CHECK(waiter.silent_for(50ms));
  StoreClient setter("127.0.0.1", st.port(), quick());
  setter.set("/k", "v");
  setter.ping();  // the SET has been applied
  waiter.send(frame(Op::CancelWait));
  CHECK(waiter.recv(2) == std::string("\x00\x01", 2));
}

TEST_CASE("loopback: a disconnected waiter's waits are dropped") {
  ServerThread st;
  {
    RawSocket waiter(st.port());
    waiter.send(validate() + frame(Op::Wait, {"/k", "/k"}));
    CHECK(eventually([&] { return st.on_io([&] { return st.server().state().pending_waits(); }) == 1; }));
  }
  CHECK(eventually([&] { return st.on_io([&] { return st.server().state().pending_waits(); }) == 0; }));
  StoreClient c("127.0.0.1", st.port(), quick());
  c.set("/k", "v");
  CHECK(c.get("/k") == "v");
}

TEST_CASE("loopback: large values and many keys in one request") {
  ServerThread st;
  StoreClient c("127.0.0.1", st.port(), quick());
  const std::string big(8 << 20, 'b');
  c.set("/big", big);
  CHECK(c.get("/big") == big);
  std::vector<std::string> keys, values;
  for (int i = 0; i < 5000; ++i) {
    keys.push_back("/m" + std::to_string(i));
    values.push_back(std::to_string(i * i));
  }
  c.multi_set(keys, values);
  CHECK(c.multi_get(keys) == values);
}

TEST_CASE("loopback: a connection gives back the memory of a large reply once it is sent") {
  // Every node of a big job reads the node map (N records) and then idles on its connection:
  // a connection that kept each reply's buffer made the store host's memory grow with N^2.
  ServerThread st;
  const std::string big(256 * 1024, 'm');
  StoreClient writer("127.0.0.1", st.port(), quick());
  writer.set("/map", big);
  constexpr int k_readers = 16;
  std::vector<std::unique_ptr<StoreClient>> readers;
  for (int i = 0; i < k_readers; ++i) {
    readers.push_back(std::make_unique<StoreClient>("127.0.0.1", st.port(), quick()));
    CHECK(readers.back()->get("/map") == big);
  }
  // Each reply's write has completed before its client read its last byte; the server's
  // completion handlers run on its thread, which on_io() queues behind.
  std::size_t held = 0;
  for (int tries = 0; tries < 100; ++tries) {
    held = st.on_io([&st] { return st.server().buffered_bytes(); });
    if (held < (k_readers + 1) * 16 * 1024) break;
    std::this_thread::sleep_for(20ms);
  }
  CHECK(held < (k_readers + 1) * 16 * 1024);  // kept: (k_readers + 1) * 256 KiB and more
}

TEST_CASE("loopback: a client that asks for a large value many times without reading is served only as it reads") {
  ServerThread st;
  const std::string big(1024 * 1024, 'v');
  StoreClient writer("127.0.0.1", st.port(), quick());
  writer.set("/big", big);
  REQUIRE(writer.get("/big") == big);  // applied before the GETs below arrive
  RawSocket raw(st.port());
  constexpr int k_gets = 200;  // in a few reads of the server's: 200 MB of replies if all were served at once
  std::string batch = validate();
  for (int i = 0; i < k_gets; ++i) batch += frame(Op::Get, {"/big"});
  raw.send(batch);
  std::this_thread::sleep_for(300ms);
  const auto held = st.on_io([&st] { return st.server().buffered_bytes(); });
  CHECK(held < 16 * 1024 * 1024);  // 4 MB of queued output, one reply, the buffers
  // Every reply comes, in order, as the client reads.
  std::size_t received = 0;
  bool all_v = true;
  while (received < k_gets * (8 + big.size())) {
    const auto chunk = raw.recv(1 << 20, 10s);
    if (chunk.empty()) break;
    received += chunk.size();
    all_v = all_v && std::count(chunk.begin(), chunk.end(), 'v') > 0;
  }
  CHECK(received == k_gets * (8 + big.size()));
  CHECK(all_v);
  CHECK(writer.get("/big") == big);  // nobody else was held up
}

TEST_CASE("loopback: a connection does not keep the frame or the keys of a large request") {
  // The static rendezvous: every node reads the node map with one MULTI_GET of N keys.
  ServerThread st;
  std::vector<std::string> keys, values;
  for (int i = 0; i < 512; ++i) {
    keys.push_back("rankrun/node/" + std::to_string(i));
    values.push_back("1 10.0.0." + std::to_string(i % 250) + " run 12345-6789");
  }
  StoreClient writer("127.0.0.1", st.port(), quick());
  writer.multi_set(keys, values);
  constexpr int k_readers = 16;
  std::vector<std::unique_ptr<StoreClient>> readers;
  for (int i = 0; i < k_readers; ++i) {
    readers.push_back(std::make_unique<StoreClient>("127.0.0.1", st.port(), quick()));
    CHECK(readers.back()->multi_get(keys) == values);
  }
  std::size_t held = 0;
  for (int tries = 0; tries < 100; ++tries) {
    held = st.on_io([&st] { return st.server().buffered_bytes(); });
    if (held < (k_readers + 1) * 16 * 1024) break;
    std::this_thread::sleep_for(20ms);
  }
  CHECK(held < (k_readers + 1) * 16 * 1024);  // kept: a 16 KiB frame and 512 keys per connection
}

TEST_CASE("loopback: pipelined requests in one write all get replies, in order") {
  ServerThread st;
  RawSocket raw(st.port());
  std::string batch = validate() + frame(Op::Ping, {}, {}, 7);
  for (int i = 1; i <= 50; ++i) batch += frame(Op::Add, {"/p"}, {}, 1);
  raw.send(batch);
  std::string expected;
  append_u32(expected, 7);
  for (int i = 1; i <= 50; ++i) append_i64(expected, i);
  CHECK(raw.recv(expected.size()) == expected);
}

TEST_CASE("loopback: the connection limit closes the connection past it") {
  ServerOptions options;
  options.limits.max_connections = 2;
  ServerThread st(options);
  StoreClient a("127.0.0.1", st.port(), quick());
  StoreClient b("127.0.0.1", st.port(), quick());
  RawSocket third(st.port());
  CHECK(third.closed_by_peer());
  a.set("/a", "1");
  CHECK(b.get("/a") == "1");
}

TEST_CASE("loopback: the limit per address closes that address's connection past it; a closed one frees a place") {
  ServerOptions options;
  options.limits.max_connections_per_peer = 2;
  ServerThread st(options);
  StoreClient a("127.0.0.1", st.port(), quick());
  {
    StoreClient b("127.0.0.1", st.port(), quick());
    RawSocket third(st.port());
    CHECK(third.closed_by_peer());
    a.set("/a", "1");
    CHECK(b.get("/a") == "1");
  }
  // b is gone: its place is free again.
  REQUIRE(eventually([&] { return st.on_io([&] { return st.server().connection_count(); }) == 1; }));
  StoreClient c("127.0.0.1", st.port(), quick());
  CHECK(c.get("/a") == "1");
}

TEST_CASE("loopback: the observer sees opens, requests and closes; pid_of_tcp_socket finds the client") {
  RecordingObserver observer;
  ServerThread st({}, &observer);
  {
    StoreClient c("127.0.0.1", st.port(), quick());
    c.add("init/", 1);
    REQUIRE(eventually([&] { return observer.snapshot().size() >= 4; }));
    auto pid = pid_of_tcp_socket(observer.peer_ip, observer.peer_port, "127.0.0.1", st.port());
    CHECK(pid == ::getpid());
  }
  REQUIRE(eventually([&] { return observer.snapshot().size() >= 5; }));
  const auto events = observer.snapshot();
  CHECK(events == std::vector<std::string>{"open 1", "join 1 0 default", "1 PING ", "1 ADD init/", "close 1"});
  CHECK(observer.peer_ip == "127.0.0.1");
}

TEST_CASE("loopback: reset() empties every key space and closes every connection") {
  RecordingObserver observer;
  ServerThread st({}, &observer);
  StoreClient c("127.0.0.1", st.port(), quick());
  RawSocket raw(st.port());
  ClientOptions agents = quick();
  agents.key_space = "agents";
  StoreClient agent("127.0.0.1", st.port(), agents);
  agent.set("/lease", "1");
  c.set("/old", "1");
  c.ping();
  st.on_io([&] { st.server().reset(); });
  CHECK(raw.closed_by_peer());
  CHECK(st.on_io([&] { return st.server().connection_count(); }) == 0);
  // One key space is left: a fresh default with the old one's name.
  const auto spaces = st.on_io([&] { return st.server().key_spaces(); });
  REQUIRE(spaces.size() == 1);
  CHECK(st.on_io([&] { return st.server().key_space_name(spaces[0]); }) == "default");
  // The client finds its connection gone once, then reconnects on the next call.
  CHECK_THROWS_AS(c.num_keys(), StoreError);
  CHECK(c.num_keys() == 0);
  CHECK_FALSE(c.check({"/old"}));
  CHECK_THROWS_AS(agent.num_keys(), StoreError);
  CHECK(agent.num_keys() == 0);
}

TEST_CASE("loopback: a port in use is reported with the process holding it") {
  ServerThread st;
  ServerOptions options;
  options.port = st.port();
  boost::asio::io_context io;
  try {
    StoreServer second(io, options);
    FAIL("binding a taken port succeeded");
  } catch (const StoreBindError& e) {
    const std::string message = e.what();
    CAPTURE(message);
    CHECK(message.find("127.0.0.1:" + std::to_string(st.port())) != std::string::npos);
    CHECK(message.find("address in use by pid " + std::to_string(::getpid())) != std::string::npos);
    // rankrun-store's own flag by default; the launcher names its --master-port.
    CHECK(message.find("pass --port=0 or stop that process") != std::string::npos);
  }
  options.port_flag = "--master-port";
  try {
    StoreServer second(io, options);
    FAIL("binding a taken port succeeded");
  } catch (const StoreBindError& e) {
    CHECK(std::string(e.what()).find("pass --master-port=0 or stop that process") != std::string::npos);
  }
  auto owner = find_listener(st.port());
  REQUIRE(owner);
  CHECK(owner->pid == ::getpid());
  CHECK(owner->local_ip == "127.0.0.1");
  CHECK(owner->command_line.find("rankrun_store_tests") != std::string::npos);
}

TEST_CASE("loopback: the server binds only the address it is given") {
  ServerThread st;
  CHECK(st.on_io([&] { return st.server().address(); }) == "127.0.0.1");
  ServerOptions any;
  any.bind_address = "0.0.0.0";
  ServerThread all(any);
  CHECK(all.on_io([&] { return all.server().address(); }) == "0.0.0.0");
  StoreClient c("127.0.0.1", all.port(), quick());
  c.ping();
}

TEST_CASE("loopback: \"::\" listens on IPv6 and IPv4 alike") {
  ServerOptions options;
  options.bind_address = "::";
  std::optional<ServerThread> st;
  std::optional<std::string> no_ipv6;
  try {
    st.emplace(options);
  } catch (const StoreBindError& e) {
    no_ipv6 = e.what();
  }
  SKIP_UNLESS(!no_ipv6, "no IPv6 here: " + no_ipv6.value_or(""));
  StoreClient v6("::1", st->port(), quick());
  StoreClient v4("127.0.0.1", st->port(), quick());
  v6.set("/from6", "1");
  CHECK(v4.get("/from6") == "1");
}

TEST_CASE("loopback: a client gives up connecting after connect_timeout, naming the endpoint") {
  std::uint16_t port = 0;
  {
    ServerThread st;
    port = st.port();
  }
  ClientOptions o;
  o.connect_timeout = 300ms;
  const auto start = std::chrono::steady_clock::now();
  try {
    StoreClient c("127.0.0.1", port, o);
    FAIL("connected to a closed port");
  } catch (const StoreError& e) {
    CHECK(std::string(e.what()).find("127.0.0.1:" + std::to_string(port)) != std::string::npos);
  }
  const auto took = std::chrono::steady_clock::now() - start;
  CHECK(took >= 300ms);
  CHECK(took < 3s);
}

namespace {

// A loopback listener on a port of its own; closed with the object.
struct Listener {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  std::uint16_t port = 0;
  Listener() {
    REQUIRE(fd >= 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(::listen(fd, 4) == 0);
    socklen_t len = sizeof a;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
  }
  ~Listener() { ::close(fd); }
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;
};

}  // namespace

TEST_CASE("loopback: each failure says its kind and stage, and its detail without the endpoint") {
  ClientOptions o;
  o.connect_timeout = 300ms;
  o.timeout = 100ms;
  SUBCASE("a closed port: unreachable at connect, in the system's words") {
    std::uint16_t port = 0;
    {
      Listener gone;
      port = gone.port;
    }
    const auto e = error_of([&] { StoreClient c("127.0.0.1", port, o); });
    CHECK(e.kind() == StoreFailure::Unreachable);
    CHECK(e.stage() == StoreStage::Connect);
    CHECK(e.detail() == "Connection refused");
    CHECK(std::string(e.what()).find("127.0.0.1:" + std::to_string(port)) != std::string::npos);
  }
  SUBCASE("a listener that never answers: no reply in the handshake") {
    Listener silent;  // the kernel completes the connections; nothing reads them
    const auto e = error_of([&] { StoreClient c("127.0.0.1", silent.port, o); });
    CHECK(e.kind() == StoreFailure::NoReply);
    CHECK(e.stage() == StoreStage::Handshake);
    CHECK(e.detail().rfind("handshake failed: no reply within ", 0) == 0);
    CHECK(e.detail().find("127.0.0.1") == std::string::npos);
  }
  SUBCASE("an HTTP server: not a store, at once") {
    Listener http;
    std::thread answer([&] {
      const int c = ::accept(http.fd, nullptr, nullptr);
      if (c < 0) return;
      const std::string reply = "HTTP/1.1 400 Bad Request\r\n\r\n";
      (void)!::write(c, reply.data(), reply.size());
      ::close(c);
    });
    const auto e = error_of([&] { StoreClient c("127.0.0.1", http.port, o); });
    answer.join();
    CHECK(e.kind() == StoreFailure::NotAStore);
    CHECK(e.stage() == StoreStage::Handshake);
  }
  SUBCASE("a store that goes away: closed, on the request; a wait past its deadline: timed out") {
    auto st = std::make_unique<ServerThread>();
    StoreClient c("127.0.0.1", st->port(), o);
    const auto timeout = error_of([&] { (void)c.get("/never", 50ms); });
    CHECK(timeout.kind() == StoreFailure::Timeout);
    CHECK(timeout.detail() == "timed out after 50 ms waiting for '/never'");
    st.reset();
    const auto closed = error_of([&] { (void)c.add("/n", 1); });
    CHECK(closed.kind() == StoreFailure::Closed);
    CHECK(closed.stage() == StoreStage::Request);
    CHECK(closed.detail().rfind("ADD: ", 0) == 0);
  }
}

namespace {

// Runs `connect` in a thread, makes `cancel` readable after 200 ms, and returns the error the
// connect ended with ("" if it connected).
std::string cancelled_connect_error(const std::function<void(int cancel_fd)>& connect) {
  const int cancel = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  REQUIRE(cancel >= 0);
  std::string error;
  std::thread t([&] {
    try {
      connect(cancel);
    } catch (const StoreError& e) {
      error = e.what();
    }
  });
  std::this_thread::sleep_for(200ms);
  const std::uint64_t one = 1;
  CHECK(::write(cancel, &one, sizeof one) == static_cast<ssize_t>(sizeof one));
  t.join();
  ::close(cancel);
  return error;
}

}  // namespace

TEST_CASE("loopback: the owner's cancel_fd ends a connect in progress: refused and retrying, or in the handshake") {
  // Without it, a node stopping waited for a connect to its store host (gone, or not answering)
  // to use up its whole connect timeout.
  ClientOptions o;
  o.connect_timeout = 3s;  // longer than the test waits for: the error must be the cancel's
  o.timeout = 3s;
  o.key_space = "agents";

  SUBCASE("nothing listens: the retries stop") {
    std::uint16_t port = 0;
    {
      ServerThread st;
      port = st.port();
    }
    const auto error = cancelled_connect_error([&](int cancel) {
      o.cancel_fd = cancel;
      StoreClient c("127.0.0.1", port, o);
    });
    CHECK(error == "store 127.0.0.1:" + std::to_string(port) + ": interrupted");
  }
  SUBCASE("a listener that never answers the handshake") {
    const Listener silent;
    const auto error = cancelled_connect_error([&](int cancel) {
      o.cancel_fd = cancel;
      StoreClient c("127.0.0.1", silent.port, o);
    });
    CHECK(error.find("interrupted") != std::string::npos);
    CHECK(error.find("cannot connect") == std::string::npos);
  }
}

// --- key spaces ---------------------------------------------------------------------------

namespace {

std::string choose_space(std::string_view name, Generation g = Generation::V2_2) {
  return frame(Op::Set, {std::string(k_key_space_key)}, {std::string(name)}, 0, g);
}

ClientOptions in_space(std::string name) {
  ClientOptions o = quick();
  o.key_space = std::move(name);
  return o;
}

std::size_t pending_waits(ServerThread& st, KeySpaceId space) {
  return st.on_io([&] { return st.server().state(space).pending_waits(); });
}

}  // namespace

TEST_CASE("loopback: ending key space B keeps space A's keys, waits and connections; drops B's") {
  ServerThread st;
  const KeySpaceId a = 0;
  StoreClient client_a("127.0.0.1", st.port(), quick());
  RawSocket waiter_a(st.port());
  client_a.set("/a", "1");
  waiter_a.send(validate() + frame(Op::Wait, {"/a-later"}));
  REQUIRE(eventually([&] { return pending_waits(st, a) == 1; }));

  const KeySpaceId b = st.on_io([&] { return st.server().begin_key_space("workers/1"); });
  CHECK(b != a);
  StoreClient client_b("127.0.0.1", st.port(), quick());
  RawSocket waiter_b(st.port());
  client_b.set("/b", "2");
  waiter_b.send(validate() + frame(Op::Wait, {"/never"}));
  REQUIRE(eventually([&] { return pending_waits(st, b) == 1; }));
  CHECK(st.on_io([&] { return st.server().connection_count(b); }) == 2);
  CHECK(st.on_io([&] { return st.server().connection_count(a); }) == 2);

  // The next attempt: a fresh space for new connections, then B goes.
  const KeySpaceId c = st.on_io([&] { return st.server().begin_key_space("workers/2"); });
  st.on_io([&] { st.server().end_key_space(b); });
  CHECK(waiter_b.closed_by_peer());
  CHECK_THROWS_AS(client_b.num_keys(), StoreError);  // its connection is gone
  CHECK_FALSE(st.on_io([&] { return st.server().find_key_space("workers/1").has_value(); }));
  CHECK_THROWS_AS(st.on_io([&] { return st.server().state(b).num_keys(); }), std::out_of_range);
  CHECK(st.on_io([&] { return st.server().connection_count(b); }) == 0);

  // A: same connections (no StoreError, no reconnect), same keys, its wait still armed.
  CHECK(client_a.get("/a") == "1");
  client_a.set("/a2", "3");
  CHECK(client_a.num_keys() == 2);
  CHECK(pending_waits(st, a) == 1);
  CHECK(waiter_a.silent_for(50ms));
  client_a.set("/a-later", "x");
  CHECK(waiter_a.recv(1) == std::string(1, '\x00'));
  CHECK(st.on_io([&] { return st.server().connection_count(a); }) == 2);

  // client_b reconnects into the default of now, C, which does not know "/b".
  CHECK(client_b.num_keys() == 0);
  CHECK(st.on_io([&] { return st.server().connection_count(c); }) == 1);
}

TEST_CASE("loopback: a new connection after begin_key_space joins it and does not see old keys") {
  ServerThread st;
  StoreClient old_client("127.0.0.1", st.port(), quick());
  old_client.set("/old", "1");
  const KeySpaceId next = st.on_io([&] { return st.server().begin_key_space("attempt-1"); });
  CHECK(st.on_io([&] { return st.server().default_key_space(); }) == next);
  StoreClient new_client("127.0.0.1", st.port(), quick());
  CHECK_FALSE(new_client.check({"/old"}));
  CHECK(new_client.num_keys() == 0);
  CHECK_FALSE(new_client.wait({"/old"}, 50ms));
  new_client.set("/new", "2");
  // A SET in one key space does not wake a WAIT in another.
  CHECK_FALSE(old_client.wait({"/new"}, 50ms));
  CHECK(old_client.get("/old") == "1");
  CHECK(old_client.num_keys() == 1);
  CHECK(st.on_io([&] { return st.server().state().value("/new").has_value(); }));
  CHECK(st.on_io([&] { return st.server().state(0).value("/old").has_value(); }));
  CHECK_FALSE(st.on_io([&] { return st.server().state(0).value("/new").has_value(); }));
  CHECK(st.on_io([&] { return st.server().key_space_name(next); }) == "attempt-1");
  CHECK(st.on_io([&] { return st.server().key_spaces(); }) == std::vector<KeySpaceId>{0, next});
}

TEST_CASE("loopback: ending the default key space begins a fresh one with the same name") {
  ServerThread st;
  StoreClient agent("127.0.0.1", st.port(), in_space("agents"));
  agent.set("/lease/0", "alive");
  StoreClient worker("127.0.0.1", st.port(), quick());
  worker.set("/w", "1");
  const KeySpaceId old_default = st.on_io([&] { return st.server().default_key_space(); });
  st.on_io([&] { st.server().end_key_space(old_default); });
  const KeySpaceId fresh = st.on_io([&] { return st.server().default_key_space(); });
  CHECK(fresh != old_default);
  CHECK(st.on_io([&] { return st.server().key_space_name(fresh); }) == "default");
  CHECK_THROWS_AS(worker.num_keys(), StoreError);
  CHECK(worker.num_keys() == 0);                              // reconnected into the fresh default
  CHECK(agent.get("/lease/0") == "alive");                    // untouched, same connection
  st.on_io([&] { st.server().end_key_space(old_default); });  // gone already: ignored
  CHECK(agent.num_keys() == 1);
}

TEST_CASE("loopback: a client picks its key space by name with a first SET of rankrun/key-space") {
  RecordingObserver observer;
  ServerThread st({}, &observer);
  StoreClient agent0("127.0.0.1", st.port(), in_space("agents"));
  const auto agents = st.on_io([&] { return st.server().find_key_space("agents"); });
  REQUIRE(agents);
  StoreClient agent1("127.0.0.1", st.port(), in_space("agents"));  // joins, does not create
  CHECK(st.on_io([&] { return st.server().key_spaces().size(); }) == 2);
  StoreClient worker("127.0.0.1", st.port(), quick());
  agent0.set("/round", "1");
  CHECK(agent1.get("/round") == "1");
  CHECK_FALSE(worker.check({"/round"}));
  // The choosing SET is not stored, in either space.
  CHECK(agent1.num_keys() == 1);
  CHECK(worker.num_keys() == 0);
  CHECK_FALSE(agent1.check({std::string(k_key_space_key)}));
  CHECK(st.on_io([&] { return st.server().connection_count(*agents); }) == 2);

  // A 1.13-table client can choose too, and so can a raw one (no VALIDATE, no reply to the SET).
  ClientOptions legacy = in_space("agents");
  legacy.protocol = ClientProtocol::V1_13;
  StoreClient agent2("127.0.0.1", st.port(), legacy);
  CHECK(agent2.get("/round") == "1");
  RawSocket raw(st.port());
  raw.send(choose_space("agents", Generation::V1_13) + frame(Op::GetNumKeys, {}, {}, 0, Generation::V1_13));
  CHECK(raw.recv(8) == le64(1));
  // VALIDATE and PING may come first.
  RawSocket pinged(st.port());
  pinged.send(validate() + frame(Op::Ping, {}, {}, 9) + choose_space("agents") + frame(Op::GetNumKeys));
  std::string expected;
  append_u32(expected, 9);
  expected += le64(1);
  CHECK(pinged.recv(12) == expected);
  CHECK(st.on_io([&] { return st.server().connection_count(*agents); }) == 5);

  // Observers: on_join into the default, then (after the client's PING) into the chosen space;
  // the handshake's COMPARE_SET is no on_request.
  const auto events = observer.snapshot();
  const std::string agents_id = std::to_string(*agents);
  CHECK(events[0] == "open 1");
  CHECK(events[1] == "join 1 0 default");
  CHECK(events[2] == "1 PING ");
  CHECK(events[3] == "join 1 " + agents_id + " agents");
  for (const auto& e : events) {
    CAPTURE(e);
    CHECK(e.find("SET " + std::string(k_key_space_key)) == std::string::npos);  // COMPARE_SET too
  }
}

TEST_CASE("loopback: key space limits and misuse close only the offending connection") {
  ServerOptions options;
  options.max_client_key_spaces = 2;
  ServerThread st(options);
  StoreClient bystander("127.0.0.1", st.port(), quick());
  bystander.set("/k", "v");

  SUBCASE("names that are not valid") {
    for (const std::string& name : {std::string(), std::string(k_max_key_space_name + 1, 'n'), std::string("a b"),
                                    std::string("tab\there"), std::string("nul\0x", 5), std::string("\x7F")}) {
      CAPTURE(name);
      RawSocket raw(st.port());
      raw.send(validate() + choose_space(name) + frame(Op::GetNumKeys));
      CHECK(raw.closed_by_peer());
    }
    // The longest valid name is fine.
    RawSocket longest(st.port());
    longest.send(validate() + choose_space(std::string(k_max_key_space_name, 'n')) + frame(Op::GetNumKeys));
    CHECK(longest.recv(8) == le64(0));
    // The client refuses a bad name before connecting.
    CHECK_THROWS_AS(StoreClient("127.0.0.1", st.port(), in_space("a b")), StoreError);
  }
  SUBCASE("the number of key spaces clients may create") {
    StoreClient one("127.0.0.1", st.port(), in_space("one"));
    StoreClient two("127.0.0.1", st.port(), in_space("two"));
    RawSocket three(st.port());
    three.send(validate() + choose_space("three") + frame(Op::GetNumKeys));
    CHECK(three.closed_by_peer());
    CHECK_FALSE(st.on_io([&] { return st.server().find_key_space("three").has_value(); }));
    // Existing names can still be joined, and the host is never refused.
    StoreClient one_again("127.0.0.1", st.port(), in_space("one"));
    CHECK(st.on_io([&] { return st.server().begin_key_space("host-1"); }) > 0);
    CHECK(st.on_io([&] { return st.server().begin_key_space("host-2"); }) > 0);
    // Ending one frees its place.
    st.on_io([&] { st.server().end_key_space(*st.server().find_key_space("two")); });
    StoreClient three_now("127.0.0.1", st.port(), in_space("three"));
    three_now.ping();
  }
  SUBCASE("a SET of rankrun/key-space after the first request") {
    RawSocket late(st.port());
    late.send(validate() + frame(Op::GetNumKeys));
    CHECK(late.recv(8) == le64(1));
    late.send(choose_space("late") + frame(Op::GetNumKeys));
    CHECK(late.closed_by_peer());
    CHECK_FALSE(st.on_io([&] { return st.server().find_key_space("late").has_value(); }));
  }
  SUBCASE("begin_key_space refuses bad and taken names") {
    CHECK_THROWS_AS(st.on_io([&] { return st.server().begin_key_space(""); }), std::invalid_argument);
    CHECK_THROWS_AS(st.on_io([&] { return st.server().begin_key_space("a b"); }), std::invalid_argument);
    CHECK_THROWS_AS(st.on_io([&] { return st.server().begin_key_space("default"); }), std::invalid_argument);
    CHECK(st.on_io([&] { return st.server().default_key_space(); }) == 0);
  }
  CHECK(bystander.get("/k") == "v");
  CHECK(bystander.num_keys() == 1);
}

// --- the job secret and the workers' key spaces ---------------------------------------------

namespace {

ClientOptions agent_with(std::shared_ptr<const JobSecret> secret, std::string name = "agents") {
  ClientOptions o = in_space(std::move(name));
  o.job_secret = std::move(secret);
  return o;
}

// The StoreRefused a client's constructor throws, or none.
std::optional<StoreRefused> refusal_of(std::uint16_t port, const ClientOptions& options) {
  try {
    StoreClient client("127.0.0.1", port, options);
  } catch (const StoreRefused& e) {
    return e;
  }
  return std::nullopt;
}

std::string value_of(std::string_view bytes) {
  std::string out;
  append_bytes(out, bytes);
  return out;
}

// A store that answers the handshake as one that does not know the secret but pretends to: it
// challenges, takes any proof, and answers "joined:" with a proof of its own making.
class PretendingStore {
 public:
  PretendingStore() {
    m_listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(m_listener, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(::listen(m_listener, 4) == 0);
    socklen_t len = sizeof a;
    ::getsockname(m_listener, reinterpret_cast<sockaddr*>(&a), &len);
    m_port = ntohs(a.sin_port);
    m_thread = std::thread([this] { serve(); });
  }
  ~PretendingStore() {
    ::shutdown(m_listener, SHUT_RDWR);
    m_thread.join();
    ::close(m_listener);
  }
  std::uint16_t port() const { return m_port; }
  bool got_proof() const { return m_got_proof; }

 private:
  void serve() {
    const int fd = ::accept4(m_listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) return;
    std::string in;
    Request request;
    std::optional<Generation> generation;
    const auto next = [&]() -> bool {
      for (;;) {
        while (!in.empty()) {
          if (!generation) generation = detect_generation(in, ProtocolChoice::Auto);
          if (!generation) break;
          const auto result = decode_request(in, *generation, Limits{}, request);
          if (result.status != DecodeStatus::Complete) break;
          in.erase(0, result.used);
          if (request.op == Op::Validate) continue;
          return true;
        }
        char buf[4096];
        const ssize_t got = ::recv(fd, buf, sizeof buf, 0);
        if (got <= 0) return false;
        in.append(buf, static_cast<std::size_t>(got));
      }
    };
    std::string out;
    while (next()) {
      out.clear();
      if (request.op == Op::Ping) {
        append_u32(out, static_cast<std::uint32_t>(request.number));
      } else if (request.op == Op::CompareSet && request.keys[0] == k_key_space_key) {
        out = value_of(reply_challenge(std::string(k_nonce_bytes, 'S')));
      } else if (request.op == Op::CompareSet && request.keys[0] == k_key_space_proof_key) {
        m_got_proof = true;
        out = value_of(reply_joined_with_proof(std::string(k_proof_bytes, 'P')));
      }
      ::send(fd, out.data(), out.size(), MSG_NOSIGNAL);
    }
    ::close(fd);
  }

  int m_listener = -1;
  std::uint16_t m_port = 0;
  std::atomic<bool> m_got_proof{false};
  std::thread m_thread;
};

std::string choose_with(std::string_view name, std::string_view hello) {
  return frame(Op::CompareSet, {std::string(k_key_space_key)}, {std::string(name), std::string(hello)});
}

}  // namespace

TEST_CASE("loopback: a store for workers alone (max_client_key_spaces 0) refuses every name") {
  ServerOptions options;
  options.max_client_key_spaces = 0;
  ServerThread st(options);
  StoreClient bystander("127.0.0.1", st.port(), quick());
  bystander.set("/k", "v");
  // The plain choice: closed, nothing answered.
  RawSocket plain(st.port());
  plain.send(validate() + choose_space("rankrun-agents") + frame(Op::GetNumKeys));
  CHECK(plain.recv(1).empty());
  CHECK(plain.closed_by_peer());
  // The handshake (no secret here): refused, saying why, then closed.
  RawSocket hello(st.port());
  hello.send(validate() + choose_with("attempt_0", "") + frame(Op::GetNumKeys));
  const std::string refused =
      value_of(reply_refused("asked for key space 'attempt_0' by name, and this store serves its workers only"));
  CHECK(hello.recv(refused.size()) == refused);
  CHECK(hello.closed_by_peer());
  CHECK_FALSE(st.on_io([&] { return st.server().find_key_space("rankrun-agents").has_value(); }));
  CHECK_FALSE(st.on_io([&] { return st.server().find_key_space("attempt_0").has_value(); }));
  // A connection that names none (a worker's) is served as before.
  StoreClient worker("127.0.0.1", st.port(), quick());
  CHECK(worker.get("/k") == "v");
}

TEST_CASE("loopback: with a job secret, a client joins by name only with its proof, and the store proves it too") {
  ServerOptions options;
  options.job_secret = make_job_secret("the job's secret");
  RecordingObserver observer;
  ServerThread st(options, &observer);
  StoreClient bystander("127.0.0.1", st.port(), quick());
  bystander.set("/k", "v");

  StoreClient agent("127.0.0.1", st.port(), agent_with(make_job_secret("the job's secret")));
  agent.set("round", "1");
  StoreClient again("127.0.0.1", st.port(), agent_with(make_job_secret("the job's secret")));
  CHECK(again.get("round") == "1");
  const auto agents = st.on_io([&] { return st.server().find_key_space("agents"); });
  REQUIRE(agents);
  CHECK(st.on_io([&] { return st.server().connection_count(*agents); }) == 2);

  SUBCASE("no secret, another secret: refused at once, saying the secrets differ") {
    const auto started = std::chrono::steady_clock::now();
    const auto none = refusal_of(st.port(), in_space("agents"));
    REQUIRE(none);
    CHECK(none->secrets_differ);
    CHECK(std::string(none->what()).find("refused this connection: no job secret") != std::string::npos);
    const auto other = refusal_of(st.port(), agent_with(make_job_secret("another secret")));
    REQUIRE(other);
    CHECK(other->secrets_differ);
    CHECK(std::string(other->what()).find("refused this connection: wrong job secret") != std::string::npos);
    CHECK(other->kind() == StoreFailure::Refused);
    CHECK(other->server_reason == "wrong job secret");
    CHECK(std::chrono::steady_clock::now() - started < 2s);  // not retried until connect_timeout
    // Neither got in: the agents' key space has its two connections, and its keys are untouched.
    CHECK(st.on_io([&] { return st.server().connection_count(*agents); }) == 2);
    const std::string into_agents = " " + std::to_string(*agents) + " agents";
    const auto events = observer.snapshot();
    CHECK(std::count_if(events.begin(), events.end(), [&](const std::string& e) {
            return e.size() > into_agents.size() &&
                   e.compare(e.size() - into_agents.size(), into_agents.size(), into_agents) == 0;
          }) == 2);
  }
  SUBCASE("raw frames: the plain SET, a hello without a proof, a proof without a hello, a GET instead of a proof") {
    for (const std::string& bytes :
         {validate() + choose_space("agents") + frame(Op::Get, {"round"}),
          validate() + choose_with("agents", "") + frame(Op::Get, {"round"}),
          validate() + frame(Op::CompareSet, {std::string(k_key_space_proof_key)}, {"agents", std::string(32, 'p')}),
          validate() + choose_with("agents", "munge:whatever")}) {
      RawSocket raw(st.port());
      raw.send(bytes);
      const auto reply = raw.recv(1 << 16);
      CAPTURE(reply);
      CHECK(reply.find('1') == std::string::npos);  // never the value of "round"
      CHECK(raw.closed_by_peer());
    }
    RawSocket challenged(st.port());
    challenged.send(validate() + choose_with("agents", make_hello(std::string(32, 'n'))));
    const auto challenge = challenged.recv(8 + 10 + 32);
    REQUIRE(challenge.size() == 50);
    CHECK(parse_reply(challenge.substr(8)).kind == HandshakeReply::Kind::Challenge);
    challenged.send(frame(Op::Get, {"round"}));
    CHECK(challenged.recv(1 << 16).empty());
    CHECK(challenged.closed_by_peer());
    // A proof that is wrong gets the refusal, then the end of the connection.
    RawSocket wrong(st.port());
    wrong.send(validate() + choose_with("agents", make_hello(std::string(32, 'n'))));
    REQUIRE(wrong.recv(50).size() == 50);
    wrong.send(frame(Op::CompareSet, {std::string(k_key_space_proof_key)}, {"agents", std::string(32, 'p')}));
    CHECK(wrong.recv(1 << 16) == value_of(reply_refused(k_refusal_wrong_secret)));
    CHECK(wrong.closed_by_peer());
    CHECK(st.on_io([&] { return st.server().connection_count(*agents); }) == 2);
  }
  SUBCASE("a store without the secret, and one that pretends: the client hangs up") {
    ServerThread open_store;
    const auto joined = refusal_of(open_store.port(), agent_with(make_job_secret("the job's secret")));
    REQUIRE(joined);
    CHECK(joined->secrets_differ);
    CHECK(std::string(joined->what()).find("has no job secret, and this end has one") != std::string::npos);
    PretendingStore pretender;
    const auto pretended = refusal_of(pretender.port(), agent_with(make_job_secret("the job's secret")));
    REQUIRE(pretended);
    CHECK(pretender.got_proof());
    CHECK(pretended->secrets_differ);
    CHECK(std::string(pretended->what()).find("did not prove the job secret") != std::string::npos);
  }
  // Workers (no key space asked for) are not asked for anything.
  CHECK(bystander.get("/k") == "v");
  StoreClient worker("127.0.0.1", st.port(), quick());
  CHECK(worker.get("/k") == "v");
  CHECK(agent.get("round") == "1");
}

TEST_CASE("loopback: a store that hands its secret out in credentials; the client takes it only if it verifies") {
  ServerOptions options;
  options.job_secret = make_job_secret("handed out");
  std::atomic<int> issued{0};
  options.issue_credential = [&issued] {
    ++issued;
    return std::string("CRED for handed out");
  };
  ServerThread st(options);
  ClientOptions taker = in_space("agents");
  std::atomic<int> taken{0};
  taker.take_credential = [&taken](const std::string& credential) -> std::shared_ptr<const JobSecret> {
    if (credential != "CRED for handed out") throw std::runtime_error("not this job's");
    ++taken;
    return make_job_secret("handed out");
  };
  StoreClient agent("127.0.0.1", st.port(), taker);
  agent.set("round", "1");
  CHECK(issued == 1);
  CHECK(taken == 1);
  StoreClient with_file_secret("127.0.0.1", st.port(), agent_with(make_job_secret("handed out")));
  CHECK(with_file_secret.get("round") == "1");
  CHECK(issued == 1);  // asked for by clients without a secret only

  SUBCASE("a credential the client does not take, or a secret that differs") {
    ClientOptions picky = in_space("agents");
    picky.take_credential = [](const std::string&) -> std::shared_ptr<const JobSecret> {
      throw std::runtime_error("encoded by uid 1000, not this job's user");
    };
    auto refused = refusal_of(st.port(), picky);
    REQUIRE(refused);
    CHECK(refused->secrets_differ);
    CHECK(std::string(refused->what()).find("does not take: encoded by uid 1000") != std::string::npos);
    ClientOptions fooled = in_space("agents");
    fooled.take_credential = [](const std::string&) { return make_job_secret("another"); };
    refused = refusal_of(st.port(), fooled);
    REQUIRE(refused);
    CHECK(std::string(refused->what()).find("wrong job secret") != std::string::npos);
  }
  SUBCASE("a store whose secret is not handed out, and one without a secret") {
    ServerOptions file_only;
    file_only.job_secret = make_job_secret("handed out");
    ServerThread no_issuer(file_only);
    auto refused = refusal_of(no_issuer.port(), taker);
    REQUIRE(refused);
    CHECK(refused->secrets_differ);
    CHECK(std::string(refused->what()).find(std::string(k_refusal_no_credential)) != std::string::npos);
    ServerThread open_store;
    refused = refusal_of(open_store.port(), taker);
    REQUIRE(refused);
    CHECK(refused->secrets_differ);
    CHECK(std::string(refused->what()).find("expects one in a credential") != std::string::npos);
  }
  SUBCASE("one credential per connection") {
    RawSocket raw(st.port());
    raw.send(validate() + choose_with("agents", std::string(k_hello_credential)));
    CHECK(raw.recv(8 + 30) == value_of(reply_credential("CRED for handed out")));
    raw.send(choose_with("agents", std::string(k_hello_credential)));
    CHECK(raw.closed_by_peer());
    CHECK(issued == 2);
  }
}

TEST_CASE(
    "loopback: workers' connections leave the agents' reserve free; idle job connections are never closed for room") {
  ServerOptions options;
  options.limits.max_connections = 8;
  options.agent_reserve = 3;
  options.job_secret = make_job_secret("the job's secret");
  ServerThread st(options);
  st.on_io([&] { st.server().admit_workers_from(std::vector<std::string>{"10.0.0.1"}); });
  // Five workers (loopback is a job host) fill the limit less the reserve.
  std::vector<std::unique_ptr<RawSocket>> workers;
  for (int i = 0; i < 5; ++i) {
    workers.push_back(std::make_unique<RawSocket>(st.port()));
    workers.back()->send(validate() + frame(Op::Add, {"/n"}, {}, 1));
    CHECK(workers.back()->recv(8) == le64(static_cast<std::uint64_t>(i + 1)));
  }
  // A sixth worker is closed at its first request, having changed nothing.
  RawSocket sixth(st.port());
  sixth.send(validate() + frame(Op::Add, {"/n"}, {}, 1));
  CHECK(sixth.closed_by_peer());
  // The agents still join, up to the whole limit.
  StoreClient agent("127.0.0.1", st.port(), agent_with(make_job_secret("the job's secret")));
  agent.set("round", "1");
  StoreClient agent2("127.0.0.1", st.port(), agent_with(make_job_secret("the job's secret")));
  CHECK(agent2.get("round") == "1");
  workers[0]->send(frame(Op::Add, {"/n"}, {}, 0));
  CHECK(workers[0]->recv(8) == le64(5));
  // An idle connection from a job host (torch 1.13's second one never speaks) holds its place:
  // the store is full, and the newcomer is the one refused.
  RawSocket idle(st.port());
  REQUIRE(eventually([&] { return st.on_io([&] { return st.server().connection_count(); }) == 8; }));
  RawSocket ninth(st.port());
  CHECK(ninth.closed_by_peer());
  CHECK(idle.silent_for(200ms));
  workers[1]->send(frame(Op::Add, {"/n"}, {}, 0));
  CHECK(workers[1]->recv(8) == le64(5));
}

TEST_CASE("loopback: the workers' key spaces are not joined by name, with or without a secret") {
  ServerOptions with_secret;
  with_secret.job_secret = make_job_secret("s");
  for (const auto& options : {ServerOptions{}, with_secret}) {
    ServerThread st(options);
    const KeySpaceId attempt = st.on_io([&] { return st.server().begin_key_space("attempt_0.ab12"); });
    StoreClient worker("127.0.0.1", st.port(), quick());
    worker.set("/secret-ish", "x");
    for (const std::string name : {"attempt_0.ab12", "default"}) {
      CAPTURE(name);
      const auto refused = refusal_of(st.port(), agent_with(options.job_secret ? make_job_secret("s") : nullptr, name));
      REQUIRE(refused);
      CHECK_FALSE(refused->secrets_differ);
      CHECK(std::string(refused->what()).find("by name, which only new connections join") != std::string::npos);
      if (!options.job_secret) {
        RawSocket raw(st.port());
        raw.send(validate() + choose_space(name) + frame(Op::GetNumKeys));
        CHECK(raw.recv(8).empty());
        CHECK(raw.closed_by_peer());
      }
    }
    // The refused connections are closed once their refusal is sent: give the server that moment.
    CHECK(eventually([&] { return st.on_io([&] { return st.server().connection_count(attempt); }) == 1; }));
    CHECK(worker.get("/secret-ish") == "x");
  }
}

TEST_CASE("loopback: two observers both see opens, joins, requests and closes; removal stops one") {
  RecordingObserver first;
  RecordingObserver second;
  ServerThread st({}, &first);
  st.on_io([&] {
    st.server().add_observer(&second);
    st.server().add_observer(&second);  // once only
  });
  {
    StoreClient c("127.0.0.1", st.port(), in_space("agents"));
    c.add("/n", 1);
  }
  const std::vector<std::string> expected{"open 1",          "join 1 0 default", "1 PING ",
                                          "join 1 1 agents", "1 ADD /n",         "close 1"};
  REQUIRE(eventually([&] { return second.snapshot().size() >= expected.size(); }));
  CHECK(first.snapshot() == expected);
  CHECK(second.snapshot() == expected);

  st.on_io([&] { st.server().remove_observer(&first); });
  {
    StoreClient c("127.0.0.1", st.port(), quick());
    c.ping();
  }
  REQUIRE(eventually([&] { return second.snapshot().size() >= expected.size() + 4; }));
  CHECK(first.snapshot().size() == expected.size());
}

namespace {

// Ends the key space of whichever connection sends an ADD, from inside on_request.
struct EndingObserver : StoreObserver {
  StoreServer* server = nullptr;
  std::atomic<int> requests{0};
  std::map<std::uint64_t, KeySpaceId> space_of;
  void on_join(std::uint64_t conn, KeySpaceId space, std::string_view) override { space_of[conn] = space; }
  void on_request(std::uint64_t conn, Op op, std::string_view) override {
    ++requests;
    if (op == Op::Add) server->end_key_space(space_of.at(conn));
  }
};

}  // namespace

TEST_CASE("loopback: an observer may end the key space of the connection it is told about") {
  EndingObserver ender;
  RecordingObserver after;
  ServerThread st({}, &ender);
  st.on_io([&] {
    ender.server = &st.server();
    st.server().add_observer(&after);
  });
  StoreClient agent("127.0.0.1", st.port(), in_space("agents"));
  agent.set("/lease", "1");
  const KeySpaceId b = st.on_io([&] { return st.server().begin_key_space("workers/1"); });
  RawSocket worker(st.port());
  worker.send(validate() + frame(Op::Set, {"/w"}, {"1"}) + frame(Op::Add, {"/c"}, {}, 1) + frame(Op::GetNumKeys));
  CHECK(worker.closed_by_peer());
  CHECK(worker.recv(1).empty());  // the ADD was dropped, nothing after it ran
  CHECK_THROWS_AS(st.on_io([&] { return st.server().state(b).num_keys(); }), std::out_of_range);
  // The observer after the ending one heard the close, not the dropped ADD.
  const auto events = after.snapshot();
  CHECK(std::find(events.begin(), events.end(), "2 SET /w") != events.end());
  CHECK(std::find(events.begin(), events.end(), "2 ADD /c") == events.end());
  CHECK(std::find(events.begin(), events.end(), "close 2") != events.end());
  CHECK(agent.get("/lease") == "1");
  // The agents' space ends the same way; its name is free again, so the client's reconnect
  // creates a new, empty one.
  CHECK_THROWS_AS(agent.add("/count", 1), StoreError);
  CHECK(agent.num_keys() == 0);
}

namespace {

// Ends the default key space when connection `end_default_on_open_of` opens; on any close,
// removes itself and ends `end_on_close`.
struct ReshapingObserver : StoreObserver {
  StoreServer* server = nullptr;
  std::uint64_t end_default_on_open_of = 0;
  std::optional<KeySpaceId> end_on_close;
  void on_open(std::uint64_t conn, const std::string&, std::uint16_t, std::uint16_t) override {
    if (conn == end_default_on_open_of) server->end_key_space(server->default_key_space());
  }
  void on_close(std::uint64_t) override {
    server->remove_observer(this);
    if (end_on_close) server->end_key_space(*end_on_close);
  }
};

}  // namespace

TEST_CASE("loopback: observers may end key spaces and remove themselves from any callback") {
  ReshapingObserver reshaper;
  RecordingObserver recorder;
  ServerThread st({}, &reshaper);
  st.on_io([&] {
    reshaper.server = &st.server();
    reshaper.end_default_on_open_of = 3;
    st.server().add_observer(&recorder);
  });
  StoreClient agent("127.0.0.1", st.port(), in_space("agents"));  // connection 1
  StoreClient worker("127.0.0.1", st.port(), quick());            // connection 2
  st.on_io([&] { reshaper.end_on_close = st.server().find_key_space("agents"); });
  REQUIRE(reshaper.end_on_close);
  // Its open ends the default space (closing it and connection 2); the first close ends the
  // agents' space from inside that, closing connection 1.
  RawSocket third(st.port());
  CHECK(third.closed_by_peer());
  REQUIRE(eventually([&] { return st.on_io([&] { return st.server().connection_count(); }) == 0; }));
  const auto events = recorder.snapshot();
  for (const char* e : {"close 1", "close 2", "close 3"}) {
    CHECK(std::count(events.begin(), events.end(), e) == 1);
  }
  // The recorder comes after the observer that closed connection 3 while it was being opened.
  CHECK(std::count(events.begin(), events.end(), "open 3") == 0);
  CHECK(std::count(events.begin(), events.end(), "join 3 0 default") == 0);
  CHECK_THROWS_AS(worker.num_keys(), StoreError);
  CHECK_THROWS_AS(agent.num_keys(), StoreError);
  const auto spaces = st.on_io([&] { return st.server().key_spaces(); });
  REQUIRE(spaces.size() == 1);
  CHECK(spaces[0] == st.on_io([&] { return st.server().default_key_space(); }));
  // The server serves on; the removed observer hears nothing more.
  const auto heard = recorder.snapshot().size();
  StoreClient fresh("127.0.0.1", st.port(), quick());
  fresh.set("/k", "v");
  CHECK(fresh.get("/k") == "v");
  CHECK(eventually([&] { return recorder.snapshot().size() > heard; }));
}

TEST_CASE("loopback: rankrun-store names its own --port flag") {
  const auto run = [](const std::string& args) {
    const std::string command = std::string(RANKRUN_STORE_BIN) + " " + args + " 2>&1";
    FILE* pipe = ::popen(command.c_str(), "r");
    REQUIRE(pipe != nullptr);
    std::string out;
    char buf[512];
    while (std::fgets(buf, sizeof(buf), pipe) != nullptr) out += buf;
    const int status = ::pclose(pipe);
    return std::make_pair(WIFEXITED(status) ? WEXITSTATUS(status) : -1, out);
  };
  for (const char* bad : {"70000", "-1", "abc", "1x"}) {
    auto [rc, out] = run(std::string("--port=") + bad);
    CAPTURE(out);
    CHECK(rc == 2);
    // CLI11's validation message: the option, then what is wrong with the value.
    CHECK(out.find(std::string("--port: ") + bad + " is not a TCP port") != std::string::npos);
    CHECK(out.find("master-port") == std::string::npos);
  }
  ServerThread st;
  auto [rc, out] = run("--port=" + std::to_string(st.port()));
  CAPTURE(out);
  CHECK(rc == 1);
  CHECK(out.find("address in use by pid " + std::to_string(::getpid())) != std::string::npos);
  CHECK(out.find("pass --port=0") != std::string::npos);
  CHECK(out.find("master-port") == std::string::npos);
}

// --- port_owner on this process's own sockets ------------------------------------------------

TEST_CASE("loopback: read_tcp_sockets and socket_inodes_of see a listener and a connection") {
  const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(listener >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  REQUIRE(::listen(listener, 4) == 0);
  socklen_t len = sizeof(addr);
  REQUIRE(::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  const std::uint16_t port = ntohs(addr.sin_port);
  struct stat st {};
  REQUIRE(::fstat(listener, &st) == 0);
  const auto listener_inode = static_cast<std::uint64_t>(st.st_ino);

  RawSocket client(port);
  REQUIRE(::fstat(client.fd(), &st) == 0);
  const auto client_inode = static_cast<std::uint64_t>(st.st_ino);
  const int dup_fd = ::dup(client.fd());

  const auto sockets = read_tcp_sockets();
  const auto listening = std::find_if(sockets.begin(), sockets.end(), [&](const TcpSocketEntry& e) {
    return e.state == k_tcp_listen && e.local_port == port;
  });
  REQUIRE(listening != sockets.end());
  CHECK(listening->local_ip == "127.0.0.1");
  CHECK(listening->inode == listener_inode);
  const auto connected = std::find_if(sockets.begin(), sockets.end(), [&](const TcpSocketEntry& e) {
    return e.state == k_tcp_established && e.remote_port == port && e.inode == client_inode;
  });
  CHECK(connected != sockets.end());

  // An IPv6 listener shows up from /proc/net/tcp6.
  const int listener6 = ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(listener6 >= 0);
  sockaddr_in6 addr6{};
  addr6.sin6_family = AF_INET6;
  addr6.sin6_addr = in6addr_loopback;
  if (::bind(listener6, reinterpret_cast<sockaddr*>(&addr6), sizeof(addr6)) == 0 && ::listen(listener6, 4) == 0) {
    socklen_t len6 = sizeof(addr6);
    REQUIRE(::getsockname(listener6, reinterpret_cast<sockaddr*>(&addr6), &len6) == 0);
    REQUIRE(::fstat(listener6, &st) == 0);
    const auto sockets6 = read_tcp_sockets();
    CHECK(std::any_of(sockets6.begin(), sockets6.end(), [&](const TcpSocketEntry& e) {
      return e.state == k_tcp_listen && e.local_ip == "::1" && e.local_port == ntohs(addr6.sin6_port) &&
             e.inode == static_cast<std::uint64_t>(st.st_ino);
    }));
  } else {
    MESSAGE("no IPv6 loopback here: the tcp6 part is skipped");
  }
  ::close(listener6);

  const auto inodes = socket_inodes_of(::getpid());
  CHECK(std::is_sorted(inodes.begin(), inodes.end()));
  CHECK(std::count(inodes.begin(), inodes.end(), listener_inode) == 1);
  CHECK(std::count(inodes.begin(), inodes.end(), client_inode) == 1);  // dup()ed: listed once
  CHECK(socket_inodes_of(-1).empty());
  CHECK(socket_inodes_of(0).empty());
  CHECK(pid_of_socket_inode(client_inode) == ::getpid());
  CHECK(pid_of_socket_inode(listener_inode) == ::getpid());

  ::close(dup_fd);
  ::close(listener);
  const auto after_close = socket_inodes_of(::getpid());
  CHECK(std::count(after_close.begin(), after_close.end(), listener_inode) == 0);
}

// --- LIST_KEYS, BARRIER and queues ------------------------------------------------------------

TEST_CASE("loopback: LIST_KEYS lists the connection's own key space, keys as stored") {
  ServerThread st;
  StoreClient worker("127.0.0.1", st.port(), quick());
  StoreClient agent("127.0.0.1", st.port(), in_space("agents"));
  CHECK(worker.list_keys().empty());
  worker.set("/b", "1");
  worker.add("/a", 1);
  worker.set("plain", "");
  worker.queue_push("/q", "item");  // a queue is not a key
  agent.set("/round", "1");
  CHECK(worker.list_keys() == std::vector<std::string>{"/a", "/b", "plain"});
  CHECK(worker.num_keys() == 3);
  // The key space's choosing SET is not stored, so not listed either.
  CHECK(agent.list_keys() == std::vector<std::string>{"/round"});
  // The reply, byte for byte: i64 count, then u64 length and bytes per key.
  RawSocket raw(st.port());
  raw.send(validate() + frame(Op::ListKeys));
  const std::string expected = le64(3) + le64(2) + "/a" + le64(2) + "/b" + le64(5) + "plain";
  CHECK(raw.recv(expected.size()) == expected);
  CHECK(raw.silent_for(50ms));
}

TEST_CASE("loopback: LIST_KEYS past the reply's bound closes that connection only") {
  ServerOptions options;
  options.limits.max_keys = 4;
  ServerThread st(options);
  StoreClient c("127.0.0.1", st.port(), quick());
  for (int i = 0; i < 4; ++i) c.set("/k" + std::to_string(i), "v");
  CHECK(c.list_keys().size() == 4);
  c.set("/k4", "v");
  RawSocket raw(st.port());
  raw.send(validate() + frame(Op::ListKeys));
  CHECK(raw.closed_by_peer());
  CHECK_THROWS_AS(c.list_keys(), StoreError);
  // Nothing else changed: the client reconnects, and its keys are all there.
  CHECK(c.num_keys() == 5);
  CHECK(c.get("/k4") == "v");
}

TEST_CASE("loopback: a BARRIER of 32 clients passes together, and its key holds the count") {
  ServerThread st;
  constexpr int k_clients = 32;
  std::vector<std::thread> threads;
  std::atomic<int> passed{0};
  for (int i = 0; i < k_clients; ++i) {
    threads.emplace_back([&] {
      StoreClient c("127.0.0.1", st.port(), quick());
      if (c.barrier("/bar", k_clients, 10s)) ++passed;
    });
  }
  for (auto& t : threads) t.join();
  CHECK(passed == k_clients);
  StoreClient c("127.0.0.1", st.port(), quick());
  CHECK(c.get("/bar") == std::to_string(k_clients));
  CHECK(c.list_keys() == std::vector<std::string>{"/bar"});
  // Reused, the key passes at once: the counter is already past the world size.
  CHECK(c.barrier("/bar", k_clients, 10ms));
  CHECK(c.get("/bar") == std::to_string(k_clients + 1));
}

TEST_CASE("loopback: a BARRIER that times out is cancelled; its arrival stays counted") {
  ServerThread st;
  StoreClient c("127.0.0.1", st.port(), quick());
  const auto start = std::chrono::steady_clock::now();
  CHECK_FALSE(c.barrier("/t", 2, 100ms));
  CHECK(std::chrono::steady_clock::now() - start >= 100ms);
  CHECK(eventually([&] { return st.on_io([&] { return st.server().state().pending_waits(); }) == 0; }));
  CHECK(c.get("/t") == "1");
  // As on torch's servers, the same client coming back makes the second arrival: it passes.
  CHECK(c.barrier("/t", 2, 100ms));
  CHECK(c.get("/t") == "2");
  c.ping();
}

TEST_CASE("loopback: a connection closed in a BARRIER leaves its arrival counted, nothing else") {
  ServerThread st;
  {
    RawSocket early(st.port());
    early.send(validate() + frame(Op::Barrier, {"/b"}, {}, 3));
    CHECK(early.silent_for(50ms));
    CHECK(st.on_io([&] { return st.server().state().pending_waits(); }) == 1);
  }
  CHECK(eventually([&] { return st.on_io([&] { return st.server().state().pending_waits(); }) == 0; }));
  RawSocket second(st.port());
  second.send(validate() + frame(Op::Barrier, {"/b"}, {}, 3));
  CHECK(second.silent_for(50ms));
  StoreClient third("127.0.0.1", st.port(), quick());
  CHECK(third.barrier("/b", 3, 5s));
  CHECK(second.recv(1) == std::string(1, '\0'));
  CHECK(third.get("/b") == "3");
}

TEST_CASE("loopback: BARRIER on a key that is not a number closes that connection only") {
  ServerThread st;
  StoreClient c("127.0.0.1", st.port(), quick());
  c.set("/b", "text");
  RawSocket raw(st.port());
  raw.send(validate() + frame(Op::Barrier, {"/b"}, {}, 2));
  CHECK(raw.closed_by_peer());
  CHECK(c.get("/b") == "text");
}

TEST_CASE("loopback: queues: push, pop in order, length, and CHECK and WAIT on the queue's key") {
  ServerThread st;
  StoreClient c("127.0.0.1", st.port(), quick());
  CHECK_FALSE(c.queue_pop("/q"));
  CHECK(c.queue_len("/q") == 0);
  CHECK_FALSE(c.check({"/q"}));
  CHECK_FALSE(c.queue_pop("/q", 50ms));  // the WAIT is cancelled; the connection stays usable
  c.queue_push("/q", "first");
  c.queue_push("/q", std::string("sec\0nd", 6));
  CHECK(c.queue_len("/q") == 2);
  CHECK(c.check({"/q"}));
  CHECK(c.wait({"/q"}, 10ms));
  CHECK(c.queue_pop("/q") == "first");
  CHECK(c.queue_pop("/q", 10ms) == std::string("sec\0nd", 6));
  CHECK(c.queue_len("/q") == 0);
  CHECK_FALSE(c.check({"/q"}));
  // The raw bytes of a pop: the length before it, then the item; an empty queue sends 0 alone.
  c.queue_push("/q", "x");
  RawSocket raw(st.port());
  raw.send(validate() + frame(Op::QueuePop, {"/q"}) + frame(Op::QueuePop, {"/q"}));
  const std::string expected = le64(1) + le64(1) + "x" + le64(0);
  CHECK(raw.recv(expected.size()) == expected);
  CHECK(raw.silent_for(50ms));
}

TEST_CASE("loopback: blocking queue pops are served one item each, in the order they waited") {
  ServerThread st;
  StoreClient pusher("127.0.0.1", st.port(), quick());
  std::promise<std::optional<std::string>> first_item;
  std::promise<std::optional<std::string>> second_item;
  std::thread first([&] {
    StoreClient c("127.0.0.1", st.port(), quick());
    first_item.set_value(c.queue_pop("/jobs", 10s));
  });
  CHECK(eventually([&] { return st.on_io([&] { return st.server().state().pending_waits(); }) == 1; }));
  std::thread second([&] {
    StoreClient c("127.0.0.1", st.port(), quick());
    second_item.set_value(c.queue_pop("/jobs", 10s));
  });
  CHECK(eventually([&] { return st.on_io([&] { return st.server().state().pending_waits(); }) == 2; }));
  auto first_result = first_item.get_future();
  auto second_result = second_item.get_future();
  pusher.queue_push("/jobs", "a");
  CHECK(first_result.wait_for(5s) == std::future_status::ready);
  CHECK(first_result.get() == "a");
  CHECK(second_result.wait_for(100ms) == std::future_status::timeout);  // one push wakes one
  pusher.queue_push("/jobs", "b");
  CHECK(second_result.wait_for(5s) == std::future_status::ready);
  CHECK(second_result.get() == "b");
  first.join();
  second.join();
  CHECK(pusher.queue_len("/jobs") == 0);
  CHECK(pusher.list_keys().empty());
}
