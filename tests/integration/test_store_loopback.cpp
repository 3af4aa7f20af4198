// A real StoreServer on 127.0.0.1:0 with its own io_context thread, driven by StoreClients and
// raw sockets at once: concurrency, stalled and hostile clients, observer, reset, port owners.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <chrono>
#include <doctest/doctest.h>
#include <functional>
#include <future>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "rendezvous/port_owner.hpp"
#include "rendezvous/store_client.hpp"
#include "rendezvous/store_server.hpp"
#include "rendezvous/wire.hpp"

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
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
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
  unknown.send(validate() + std::string(1, '\x11'));  // 17: past QUEUE_LEN
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

TEST_CASE("loopback: the observer sees opens, requests and closes; pid_of_tcp_socket finds the client") {
  RecordingObserver observer;
  ServerThread st({}, &observer);
  {
    StoreClient c("127.0.0.1", st.port(), quick());
    c.add("init/", 1);
    REQUIRE(eventually([&] { return observer.snapshot().size() >= 3; }));
    auto pid = pid_of_tcp_socket(observer.peer_ip, observer.peer_port, "127.0.0.1", st.port());
    CHECK(pid == ::getpid());
  }
  REQUIRE(eventually([&] { return observer.snapshot().size() >= 4; }));
  const auto events = observer.snapshot();
  CHECK(events[0] == "open 1");
  CHECK(events[1] == "1 PING ");
  CHECK(events[2] == "1 ADD init/");
  CHECK(events[3] == "close 1");
  CHECK(observer.peer_ip == "127.0.0.1");
}

TEST_CASE("loopback: reset() empties the key space and closes every connection") {
  RecordingObserver observer;
  ServerThread st({}, &observer);
  StoreClient c("127.0.0.1", st.port(), quick());
  RawSocket raw(st.port());
  c.set("/old", "1");
  c.ping();
  st.on_io([&] { st.server().reset(); });
  CHECK(raw.closed_by_peer());
  CHECK(st.on_io([&] { return st.server().connection_count(); }) == 0);
  // The client finds its connection gone once, then reconnects on the next call.
  CHECK_THROWS_AS(c.num_keys(), StoreError);
  CHECK(c.num_keys() == 0);
  CHECK_FALSE(c.check({"/old"}));
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
    CHECK(message.find("--master-port=0") != std::string::npos);
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
  try {
    st.emplace(options);
  } catch (const StoreBindError& e) {
    MESSAGE("no IPv6 here, skipped: " << e.what());
    return;
  }
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
