// Elastic rendezvous over etcd (--rdzv-backend=etcd), in one process beside a private etcd: the
// coordinator as rankrun runs it once elected (EtcdCoordinator, then take_over() and feed() into
// a RoundHost and a LeaseWatch, all on one io_context thread, with the coordinator's own
// campaigner and writer threads), and N agents, each one std::thread with its own EtcdClient
// (a LinkStore, as NodeLink makes it) running the real agent code, the steps NodeLink's watcher
// runs: cluster::join_round with the node's etcd lease and the waiting node's store traffic
// (cluster::JoinProgress, once per poll: a keep_alive of the lease once per lease interval, CHECK
// spare/<me>, CHECK + GET rdzv/status), then at once the running node's (cluster::refresh_lease
// and cluster::await_notice).
//
//   rankrun_elastic_etcd_bench [--sizes 8,64,512,1024,2048] [--lease-sizes 8,64,512,1024,2048]
//                              [--repeat 3] [--window 12] [--node-timeout 15] [--rdzv-limit 60]
//                              [--death-runs 3] [--death-nodes 8] [--death-timeout 3]
//                              [--writer-sizes 512,2048] [--reply-timeout 0] [--poll S]
//                              [--no-waiting-keep-alive] [--etcd /usr/bin/etcd] [--tmp DIR]
//
// Every run starts its own etcd (/usr/bin/etcd 3.4) on two free loopback ports with a fresh
// --data-dir under --tmp (default $TMPDIR or /tmp: a real disk, so each write is an fsync), and
// stops it by its pid.
//
// 1. Rendezvous (every size, --repeat times, a size that fails once is not run again; RoundRules
//    min = max = N, last_call 30 s, join_timeout 600 s): every agent connects (its EtcdClient's
//    request connection), then every agent is granted its lease (--node-timeout), then all are
//    released together and call join_round (DELETE assign/<me>, PUT join/<me> with the lease,
//    wait for assign/<me>: a Txn read, then a watch on a second connection; GET assign/<me>, a
//    Txn read of the map's pages). An agent that holds its round starts the running steps at
//    once: PUT round/0/lease/<rank> with its lease, then per lease interval a keep_alive and a
//    wait for stop/0. Measured from the release: the last agent's PUT join/
//    returned; the coordinator's watch showing the first and the last join/; the RoundHost's
//    close; the coordinator's watch showing the last assign/ (its writer's last PUT applied);
//    the first and the last agent holding its RoundRecord; join/ keys deleted by etcd (a lease
//    lapsed) and agents whose first lease PUT then failed. etcd's gRPC calls per node (its
//    /metrics, grpc_server_started_total: one per HTTP request of its JSON gateway, the
//    coordinator's included), etcd's CPU time (/proc/<pid>/stat), the io thread's CPU time, the
//    agents' LinkStore calls. A rendezvous not complete after --rdzv-limit s is given up.
// 2. Running (the first repetition of each --lease-sizes size whose rendezvous worked): the
//    agents run the running node's steps in etcd mode (--node-timeout 15 s: a lease interval of
//    3 s). Each moves, after its next wait, to a new connection through a counting TCP proxy in
//    this process (the traffic of NodeLink's reconnect), which counts the HTTP bytes both ways
//    (payload, no TCP/IP headers), the HTTP requests by path and the TCP connections. Over a
//    window of --window s that starts two intervals later: those per node per second; etcd's
//    own gRPC calls and bytes and its CPU time per node per second (etcd's CPU per second with
//    the coordinator alone, measured for 3 s before the agents start, beside it). The phase
//    ends as a job does: stop/0 is written, every wait returns.
// 3. A node's death (--death-runs times each way, --death-nodes nodes, --death-timeout as
//    --node-timeout): once the round runs, node rank N-1 (a) stops right after a keep_alive
//    returned, without a word (etcd ends its lease TTL = node timeout later), or (b) revokes its
//    lease (what NodeLink::stop() does). Measured: the lease key's deletion in the coordinator's
//    watch and the RoundHost's restart hook, from the end of the node's last keep_alive (a) or
//    from the start of its revoke (b).
// 4. The coordinator's writer alone (--writer-sizes): one EtcdClient with the coordinator's
//    options writes N assign/<instance> answers with set_many (transactions of up to 128 puts),
//    as EtcdCoordinator::writer_main does at a round's close, with nothing else running; etcd's
//    WAL fsyncs per answer from its /metrics.
//
// What-ifs (not what rankrun does): --poll S makes join_round's poll (and so the waiting
// node's status reads and the watch reopenings) S seconds instead of NodeLink's (a lease
// interval, 3 s at the default --node-timeout); --no-waiting-keep-alive leaves the lease alone
// while the node waits, as NodeLink did before 2026-11-23 (a node that waited longer than
// --node-timeout lost its join).
//
// Prints a table per phase, and one "JSON {...}" line per measurement.

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <spdlog/spdlog.h>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "launcher/cluster/attempt_steps.hpp"
#include "launcher/cluster/elastic_join.hpp"
#include "launcher/cluster/etcd_coordinator.hpp"
#include "launcher/cluster/etcd_rounds.hpp"
#include "launcher/cluster/lease_watch.hpp"
#include "launcher/cluster/link_store.hpp"
#include "launcher/cluster/records.hpp"
#include "launcher/cluster/round_host.hpp"
#include "launcher/cluster/rounds.hpp"
#include "rendezvous/etcd_client.hpp"

namespace rdzv = rankrun::rendezvous;
namespace cluster = rankrun::launcher::cluster;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

struct Args {
  std::vector<int> sizes{8, 64, 512, 1024, 2048};
  std::vector<int> lease_sizes{8, 64, 512, 1024, 2048};
  std::vector<int> writer_sizes{512, 2048};
  int repeat = 3;
  double window_s = 12;
  double node_timeout_s = 15;
  double reply_timeout_s = 0;  // 0: NodeLink's, a third of the node timeout (at least 0.3 s)
  int death_runs = 3;
  int death_nodes = 8;
  double death_timeout_s = 3;
  double rdzv_limit_s = 60;        // a rendezvous not complete by then is given up
  double poll_s = 0;               // join_round's poll; 0: NodeLink's (a lease interval)
  bool waiting_keep_alive = true;  // false: as NodeLink before it renewed the lease while waiting
  std::string etcd = "/usr/bin/etcd";
  std::string tmp;
};

const char* const k_host = "127.0.0.1";
const char* const k_prefix = "/rankrun/bench/";

std::vector<int> parse_list(const std::string& s) {
  std::vector<int> out;
  std::size_t start = 0;
  while (start < s.size()) {
    auto end = s.find(',', start);
    if (end == std::string::npos) end = s.size();
    if (end > start) out.push_back(std::stoi(s.substr(start, end - start)));
    start = end + 1;
  }
  return out;
}

milliseconds ms_of(double seconds) { return milliseconds(static_cast<long long>(seconds * 1000)); }

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

double ms_or_none(const std::optional<Clock::time_point>& from, const std::optional<Clock::time_point>& to) {
  return from && to ? ms_between(*from, *to) : -1;
}

double thread_cpu_s(std::thread& t) {
  clockid_t cid{};
  if (::pthread_getcpuclockid(t.native_handle(), &cid) != 0) return 0;
  timespec ts{};
  if (::clock_gettime(cid, &ts) != 0) return 0;
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

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

// Runs `fn` on the io thread and waits for it.
template <typename Fn>
auto on_io(boost::asio::io_context& io, Fn fn) {
  std::packaged_task<decltype(fn())()> task(std::move(fn));
  auto result = task.get_future();
  boost::asio::post(io, [&task] { task(); });
  return result.get();
}

// --- a private etcd ----------------------------------------------------------------------------

class EtcdServer {
 public:
  EtcdServer(const std::string& binary, const std::string& tmp) {
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
  ~EtcdServer() { stop(); }
  EtcdServer(const EtcdServer&) = delete;
  EtcdServer& operator=(const EtcdServer&) = delete;

  std::uint16_t port() const { return m_port; }
  pid_t pid() const { return m_pid; }
  double cpu_s() const { return m_pid > 0 ? process_cpu_s(m_pid) : 0; }

  // SIGTERM, then SIGKILL after 10 s; the data directory goes.
  void stop() {
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

  std::string log_tail() const {
    std::ifstream in(m_dir / "etcd.log");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return text.size() > 3000 ? text.substr(text.size() - 3000) : text;
  }

 private:
  // Up once a range succeeds (the member has elected itself leader); else why not.
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

  std::filesystem::path m_dir;
  std::uint16_t m_port = 0;
  pid_t m_pid = -1;
};

// --- etcd's /metrics -------------------------------------------------------------------------------

// The gRPC methods the gateway's requests become (grpc_server_started_total, one per call or
// stream: each HTTP request of the JSON gateway opens one).
const std::array<const char*, 8> k_methods = {"Range",          "Txn",        "Put",        "DeleteRange", "Watch",
                                              "LeaseKeepAlive", "LeaseGrant", "LeaseRevoke"};

struct Metrics {
  std::array<double, k_methods.size()> started{};
  double started_all = 0;     // every etcdserverpb method
  double grpc_in_bytes = 0;   // etcd_network_client_grpc_received_bytes_total
  double grpc_out_bytes = 0;  // etcd_network_client_grpc_sent_bytes_total
  double fsyncs = 0;          // etcd_disk_wal_fsync_duration_seconds_count
  double puts = 0;            // etcd_debugging_mvcc_put_total
  double cpu_s = 0;           // etcd's user + system CPU, from /proc
  double method(const char* name) const {
    for (std::size_t i = 0; i < k_methods.size(); ++i) {
      if (std::strcmp(k_methods[i], name) == 0) return started[i];
    }
    return 0;
  }
};

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

// --- a counting TCP proxy --------------------------------------------------------------------

// The HTTP paths the agents' requests name (counted in the client-to-etcd bytes).
const std::array<const char*, 8> k_paths = {
    "/v3/kv/put",          "/v3/kv/range",    "/v3/kv/txn",       "/v3/kv/deleterange",
    "/v3/lease/keepalive", "/v3/lease/grant", "/v3/lease/revoke", "/v3/watch"};

struct ProxyCounts {
  std::uint64_t up = 0;    // bytes the clients sent
  std::uint64_t down = 0;  // bytes etcd sent back
  std::uint64_t connections = 0;
  std::array<std::uint64_t, k_paths.size() + 1> requests{};  // by path; the last: any other
  std::uint64_t all_requests() const {
    std::uint64_t n = 0;
    for (auto r : requests) n += r;
    return n;
  }
};

// One thread, epoll: each accepted connection gets its own connection to etcd, and the bytes
// go through unchanged. Counts bytes both ways (what the sockets carry: HTTP, no TCP/IP
// headers), connections, and the requests by path ("POST /v3/... " in the clients' bytes).
class CountingProxy {
 public:
  explicit CountingProxy(std::uint16_t target) : m_target(target) {
    m_listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    socklen_t len = sizeof(addr);
    if (m_listener < 0 || ::bind(m_listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        ::listen(m_listener, 4096) != 0 || ::getsockname(m_listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      throw std::runtime_error("proxy listener: " + std::string(std::strerror(errno)));
    }
    m_port = ntohs(addr.sin_port);
    m_epoll = ::epoll_create1(EPOLL_CLOEXEC);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.ptr = nullptr;  // the listener
    ::epoll_ctl(m_epoll, EPOLL_CTL_ADD, m_listener, &ev);
    m_thread = std::thread([this] { run(); });
  }
  ~CountingProxy() {
    m_stop = true;
    if (m_thread.joinable()) m_thread.join();
    for (auto* link : m_links) {
      for (int fd : link->fd) {
        if (fd >= 0) ::close(fd);
      }
      delete link;
    }
    ::close(m_epoll);
    ::close(m_listener);
  }
  CountingProxy(const CountingProxy&) = delete;
  CountingProxy& operator=(const CountingProxy&) = delete;

  std::uint16_t port() const { return m_port; }
  ProxyCounts counts() const {
    ProxyCounts c;
    c.up = m_up.load();
    c.down = m_down.load();
    c.connections = m_connections.load();
    for (std::size_t i = 0; i < c.requests.size(); ++i) c.requests[i] = m_requests[i].load();
    return c;
  }
  double cpu_s() { return thread_cpu_s(m_thread); }
  std::string error() const {
    const std::lock_guard lock(m_error_mutex);
    return m_error;
  }

 private:
  struct Link;
  struct End {
    Link* link = nullptr;
    int side = 0;  // 0: the client's socket, 1: etcd's
  };
  struct Link {
    std::array<int, 2> fd{-1, -1};
    std::array<std::string, 2> out;            // bytes waiting to be written to side i
    std::array<bool, 2> out_on{false, false};  // EPOLLOUT asked for on side i
    std::array<End, 2> ends;
    std::string carry;  // the clients' bytes not yet scanned for a whole request line
    bool dead = false;
  };

  void set_error(const std::string& e) {
    const std::lock_guard lock(m_error_mutex);
    if (m_error.empty()) m_error = e;
  }

  void count_requests(Link& link, const char* data, std::size_t n) {
    std::string buf = link.carry;
    buf.append(data, n);
    std::size_t pos = 0;
    std::size_t keep = buf.size() > 8 ? buf.size() - 8 : 0;
    for (;;) {
      const auto p = buf.find("POST /v3/", pos);
      if (p == std::string::npos) break;
      const auto space = buf.find(' ', p + 5);
      if (space == std::string::npos) {
        keep = p;
        break;
      }
      const std::string_view path(buf.data() + p + 5, space - p - 5);
      std::size_t i = 0;
      while (i < k_paths.size() && path != k_paths[i]) ++i;
      ++m_requests[i];
      pos = space;
      keep = std::max(keep, space);
    }
    link.carry = buf.substr(std::min(keep, buf.size()));
    if (link.carry.size() > 256) link.carry.erase(0, link.carry.size() - 256);
  }

  void watch_out(Link& link, int side, bool on) {
    auto& state = link.out_on[static_cast<std::size_t>(side)];
    if (state == on) return;
    state = on;
    epoll_event ev{};
    ev.events = EPOLLIN | (on ? EPOLLOUT : 0u);
    ev.data.ptr = &link.ends[static_cast<std::size_t>(side)];
    ::epoll_ctl(m_epoll, EPOLL_CTL_MOD, link.fd[static_cast<std::size_t>(side)], &ev);
  }

  // Writes what waits for `side`; false when its socket failed.
  bool flush(Link& link, int side) {
    auto& out = link.out[static_cast<std::size_t>(side)];
    const int fd = link.fd[static_cast<std::size_t>(side)];
    while (!out.empty()) {
      const ssize_t n = ::send(fd, out.data(), out.size(), MSG_NOSIGNAL);
      if (n > 0) {
        out.erase(0, static_cast<std::size_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        watch_out(link, side, true);
        return true;
      }
      return false;
    }
    watch_out(link, side, false);
    return true;
  }

  void kill(Link& link) {
    if (link.dead) return;
    link.dead = true;
    for (int& fd : link.fd) {
      if (fd >= 0) {
        ::epoll_ctl(m_epoll, EPOLL_CTL_DEL, fd, nullptr);
        ::close(fd);
        fd = -1;
      }
    }
    m_dead.push_back(&link);
  }

  void accept_all() {
    for (;;) {
      const int c = ::accept4(m_listener, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (c < 0) {
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) set_error("accept: " + std::string(std::strerror(errno)));
        return;
      }
      // A blocking connect to etcd on loopback (immediate), then non-blocking.
      const int e = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      addr.sin_port = htons(m_target);
      if (e < 0 || ::connect(e, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
        set_error("proxy connect to etcd: " + std::string(std::strerror(errno)));
        if (e >= 0) ::close(e);
        ::close(c);
        continue;
      }
      ::fcntl(e, F_SETFL, ::fcntl(e, F_GETFL) | O_NONBLOCK);
      const int one = 1;
      ::setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      ::setsockopt(e, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      auto* link = new Link;
      link->fd = {c, e};
      for (int side = 0; side < 2; ++side) {
        link->ends[static_cast<std::size_t>(side)] = End{link, side};
        epoll_event ev{};
        ev.events = EPOLLIN;
        ev.data.ptr = &link->ends[static_cast<std::size_t>(side)];
        ::epoll_ctl(m_epoll, EPOLL_CTL_ADD, link->fd[static_cast<std::size_t>(side)], &ev);
      }
      m_links.push_back(link);
      ++m_connections;
    }
  }

  void run() {
    std::vector<epoll_event> events(512);
    std::vector<char> buf(std::size_t{1} << 16);
    while (!m_stop) {
      const int n = ::epoll_wait(m_epoll, events.data(), static_cast<int>(events.size()), 100);
      if (n < 0) {
        if (errno == EINTR) continue;
        set_error("epoll_wait: " + std::string(std::strerror(errno)));
        return;
      }
      for (int k = 0; k < n; ++k) {
        const auto& ev = events[static_cast<std::size_t>(k)];
        if (ev.data.ptr == nullptr) {
          accept_all();
          continue;
        }
        auto* end = static_cast<End*>(ev.data.ptr);
        Link& link = *end->link;
        if (link.dead) continue;
        const int side = end->side;
        const int other = 1 - side;
        if (ev.events & EPOLLOUT) {
          if (!flush(link, side)) {
            kill(link);
            continue;
          }
        }
        if (ev.events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
          const ssize_t got = ::recv(link.fd[static_cast<std::size_t>(side)], buf.data(), buf.size(), 0);
          if (got > 0) {
            const auto bytes = static_cast<std::size_t>(got);
            if (side == 0) {
              m_up += bytes;
              count_requests(link, buf.data(), bytes);
            } else {
              m_down += bytes;
            }
            link.out[static_cast<std::size_t>(other)].append(buf.data(), bytes);
            if (!flush(link, other)) kill(link);
          } else if (got == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
            // One side ended (a watch ends by its client closing): what is left goes, best effort.
            (void)flush(link, other);
            kill(link);
          }
        }
      }
      for (auto* link : m_dead) {
        m_links.erase(std::remove(m_links.begin(), m_links.end(), link), m_links.end());
        delete link;
      }
      m_dead.clear();
      accept_all();
    }
  }

  std::uint16_t m_target;
  std::uint16_t m_port = 0;
  int m_listener = -1;
  int m_epoll = -1;
  std::atomic<bool> m_stop{false};
  std::atomic<std::uint64_t> m_up{0}, m_down{0}, m_connections{0};
  std::array<std::atomic<std::uint64_t>, k_paths.size() + 1> m_requests{};
  std::vector<Link*> m_links;  // the proxy thread's
  std::vector<Link*> m_dead;
  mutable std::mutex m_error_mutex;
  std::string m_error;
  std::thread m_thread;
};

// --- the coordinator -------------------------------------------------------------------------

// The elected rankrun's share, as Job::start_coordinator, on_elected (coordinate + take_over) and
// on_etcd_change (feed) wire it, with timestamps of what its watch shows.
class Coordinator {
 public:
  struct Trace {
    std::optional<Clock::time_point> elected, first_join, last_join, closed, last_assign, lapsed, restart;
    int joins = 0, lefts = 0, assigns = 0, lost = 0;
    std::string restart_why, failed;
    std::size_t map_bytes = 0;
  };

  Coordinator(std::uint16_t port, milliseconds node_timeout, const cluster::RoundRules& rules)
      : m_guard(boost::asio::make_work_guard(m_io)), m_node_timeout(node_timeout), m_rules(rules) {
    cluster::EtcdCoordinator::Settings s;
    s.host = k_host;
    s.port = port;
    s.prefix = k_prefix;
    s.node_timeout = node_timeout;
    s.name = "benchmark pid " + std::to_string(::getpid());
    m_etcd = std::make_unique<cluster::EtcdCoordinator>(
        m_io, s,
        cluster::EtcdCoordinator::Hooks{[this] { on_elected(); }, [this](const rdzv::EtcdEvent& e) { on_changed(e); },
                                        [this](const std::string& why) {
                                          m_trace.failed = why;
                                          if (m_rounds) m_rounds->stop();
                                          if (m_leases) m_leases->stop();
                                        }});
    m_io_thread = std::thread([this] { m_io.run(); });
    m_etcd->start();
  }
  ~Coordinator() { shutdown(); }
  Coordinator(const Coordinator&) = delete;
  Coordinator& operator=(const Coordinator&) = delete;

  bool wait_elected(milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    while (Clock::now() < deadline) {
      if (on_io(m_io, [this] { return m_trace.elected.has_value(); })) return true;
      std::this_thread::sleep_for(milliseconds(10));
    }
    return false;
  }

  Trace trace() {
    return on_io(m_io, [this] {
      Trace t = m_trace;
      t.map_bytes = 0;
      for (int p = 0;; ++p) {
        const auto page = m_etcd->value(cluster::round_map_key(0, p));
        if (!page) break;
        t.map_bytes += page->size();
      }
      return t;
    });
  }

  double io_cpu_s() { return thread_cpu_s(m_io_thread); }

  void shutdown() {
    if (!m_io_thread.joinable()) return;
    m_etcd->stop(milliseconds(2000));
    on_io(m_io, [this] {
      if (m_rounds) m_rounds->stop();
      if (m_leases) m_leases->stop();
      return 0;
    });
    m_guard.reset();
    m_io.stop();
    m_io_thread.join();
    m_rounds.reset();
    m_leases.reset();
    m_etcd.reset();
  }

 private:
  void on_elected() {
    m_trace.elected = Clock::now();
    m_leases = std::make_unique<cluster::LeaseWatch>(m_io, m_rules.max_nodes, m_node_timeout,
                                                     cluster::LeaseWatch::Hooks{[this](int node) {
                                                                                  ++m_trace.lost;
                                                                                  if (m_rounds) m_rounds->lost(node);
                                                                                },
                                                                                nullptr, nullptr});
    m_rounds = std::make_unique<cluster::RoundHost>(
        m_io, *m_etcd, m_rules,
        cluster::RoundHost::Hooks{[this](const std::string& why, int, int) {
                                    if (!m_trace.restart) {
                                      m_trace.restart = Clock::now();
                                      m_trace.restart_why = why;
                                    }
                                  },
                                  [this](const cluster::RoundRecord& round) {
                                    m_trace.closed = Clock::now();
                                    m_leases->start_round(static_cast<int>(round.members.size()),
                                                          cluster::lease_prefix(round.round));
                                  }});
    cluster::take_over(*m_etcd, *m_rounds, *m_leases);
  }

  void on_changed(const rdzv::EtcdEvent& e) {
    const auto now = Clock::now();
    if (e.key.rfind("join/", 0) == 0) {
      if (e.deleted) {
        ++m_trace.lefts;
      } else {
        ++m_trace.joins;
        if (!m_trace.first_join) m_trace.first_join = now;
        m_trace.last_join = now;
      }
    } else if (e.key.rfind("assign/", 0) == 0 && !e.deleted) {
      ++m_trace.assigns;
      m_trace.last_assign = now;
    } else if (e.deleted && cluster::round_lease_in_key(e.key) && !m_trace.lapsed) {
      m_trace.lapsed = now;
    }
    if (m_rounds && m_leases) cluster::feed(e, *m_rounds, *m_leases);
  }

  boost::asio::io_context m_io;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> m_guard;
  milliseconds m_node_timeout;
  cluster::RoundRules m_rules;
  std::unique_ptr<cluster::EtcdCoordinator> m_etcd;
  std::unique_ptr<cluster::LeaseWatch> m_leases;
  std::unique_ptr<cluster::RoundHost> m_rounds;
  Trace m_trace;  // io thread
  std::thread m_io_thread;
};

// --- the agents --------------------------------------------------------------------------------

cluster::NodeRecord bench_node(int i) {
  // Instance ids as long as rankrun's own (pid, '-', two random numbers).
  char instance[40];
  std::snprintf(instance, sizeof(instance), "%d-%020d", static_cast<int>(::getpid()), i);
  return cluster::NodeRecord{-1, "10.0." + std::to_string(i / 250) + "." + std::to_string(i % 250), 8, "bench",
                             instance};
}

enum class Death { Silent, Revoke };

// What the main thread and the agents share.
struct Control {
  std::mutex mutex;
  std::condition_variable main_cv;    // the main thread waits here
  std::condition_variable agents_cv;  // the agents wait here
  int connected = 0;
  int granted = 0;
  int joined = 0;
  int stage = 0;  // 1: grant the lease; 2: join
  std::atomic<bool> abort{false};
  // Where a running agent reconnects after its next wait (the counting proxy); 0: it keeps its
  // connection.
  std::atomic<std::uint16_t> run_port{0};
  std::atomic<int> victim{-1};  // the node rank that dies at its next lease refresh
  Death death = Death::Silent;
};

struct AgentResult {
  Clock::time_point done{};  // holds its round (or gave up)
  bool ok = false;
  int node_rank = -1;
  std::string error;                             // no usable round
  std::string run_error;                         // failed while running (its lease gone, etcd unreachable)
  std::optional<Clock::time_point> join_put;     // its PUT join/<me> returned
  std::optional<Clock::time_point> assign_seen;  // its wait for assign/<me> returned
  std::atomic<std::uint64_t> calls{0};           // LinkStore calls (read while the agent runs on)
  // The death phase (the victim only).
  std::optional<Clock::time_point> last_refresh;  // its last keep_alive returned
  std::optional<Clock::time_point> died;          // it stopped refreshing, or started its revoke
};

struct AgentSettings {
  int n = 0;
  std::uint16_t port = 0;
  milliseconds node_timeout{};
  milliseconds reply_timeout{};
  milliseconds poll{0};
  bool waiting_keep_alive = true;
};

// The agent's LinkStore, noting when the steps of its join return.
class TimedStore final : public cluster::LinkStore {
 public:
  TimedStore(std::unique_ptr<cluster::LinkStore> inner, AgentResult& out) : m_inner(std::move(inner)), m_out(out) {}
  void set(std::string_view key, std::string_view value) override { next().set(key, value); }
  std::string get(std::string_view key) override { return next().get(key); }
  std::string compare_set(std::string_view key, std::string_view expected, std::string_view desired) override {
    return next().compare_set(key, expected, desired);
  }
  std::int64_t add(std::string_view key, std::int64_t delta) override { return next().add(key, delta); }
  void append(std::string_view key, std::string_view value) override { next().append(key, value); }
  bool check(const std::vector<std::string>& keys) override { return next().check(keys); }
  std::vector<std::string> multi_get(const std::vector<std::string>& keys) override { return next().multi_get(keys); }
  bool delete_key(std::string_view key) override { return next().delete_key(key); }
  bool wait(const std::vector<std::string>& keys, milliseconds timeout) override {
    const bool seen = next().wait(keys, timeout);
    if (seen && !m_out.assign_seen && keys.size() == 1 && keys[0].rfind("assign/", 0) == 0)
      m_out.assign_seen = Clock::now();
    return seen;
  }
  void interrupt() override { m_inner->interrupt(); }
  std::string local_address() override { return m_inner->local_address(); }
  bool has_leases() const override { return m_inner->has_leases(); }
  std::int64_t grant(milliseconds ttl) override { return next().grant(ttl); }
  void set_leased(std::string_view key, std::string_view value, std::int64_t lease) override {
    next().set_leased(key, value, lease);
    if (!m_out.join_put && key.substr(0, 5) == "join/") m_out.join_put = Clock::now();
  }
  void keep_alive(std::int64_t lease) override { next().keep_alive(lease); }
  void revoke(std::int64_t lease) override { next().revoke(lease); }

 private:
  // The wrapped store, one more call counted.
  cluster::LinkStore& next() {
    m_out.calls.fetch_add(1, std::memory_order_relaxed);
    return *m_inner;
  }
  std::unique_ptr<cluster::LinkStore> m_inner;
  AgentResult& m_out;
};

std::unique_ptr<cluster::LinkStore> connect_agent(std::uint16_t port, milliseconds reply_timeout) {
  // As NodeLink::connect(), with a longer connect timeout (NodeLink retries its connect).
  rdzv::EtcdOptions options;
  options.connect_timeout = std::chrono::seconds(60);
  options.timeout = reply_timeout;
  options.user_timeout = reply_timeout;
  return cluster::wrap(std::make_unique<rdzv::EtcdClient>(k_host, port, k_prefix, options));
}

void agent_main(int i, const AgentSettings& s, Control& ctl, AgentResult& out) {
  int counted = 0;  // 1: in ctl.connected, 2: in ctl.granted too, 3: in ctl.joined too
  const auto count = [&](int& field) {
    std::unique_lock lock(ctl.mutex);
    ++field;
    ++counted;
    ctl.main_cv.notify_one();
    ctl.agents_cv.wait(lock, [&] { return ctl.stage >= counted || ctl.abort; });
    return !ctl.abort;
  };
  std::unique_ptr<cluster::LinkStore> store;
  std::int64_t lease = 0;
  try {
    store = std::make_unique<TimedStore>(connect_agent(s.port, s.reply_timeout), out);
    if (!count(ctl.connected)) return;
    lease = store->grant(s.node_timeout);
    if (!count(ctl.granted)) return;
    const cluster::NodeRecord me = bench_node(i);
    // The waiting node's store traffic, as NodeLink's (its printing left out): the lease renewed
    // once per lease interval (unless --no-waiting-keep-alive), the spare notice, the waiting line.
    const auto keep_every = cluster::lease_interval(s.node_timeout);
    cluster::JoinProgress progress(me.instance, s.waiting_keep_alive ? lease : 0, keep_every);
    const auto answer = cluster::join_round(
        *store, me,
        [&](cluster::LinkStore& c) {
          if (ctl.abort) return false;
          progress.step(c, [](const std::string&) {});
          return true;
        },
        s.poll.count() > 0 ? s.poll : keep_every, lease);
    out.done = Clock::now();
    if (answer.kind == cluster::JoinAnswer::Kind::Round && static_cast<int>(answer.round.members.size()) == s.n) {
      out.node_rank = answer.node_rank;
      out.ok = out.node_rank >= 0 && answer.round.members[static_cast<std::size_t>(out.node_rank)].host == me.host;
    }
    if (!out.ok)
      out.error = "join answer: kind " + std::to_string(static_cast<int>(answer.kind)) + " " + answer.message;
  } catch (const std::exception& e) {
    out.error = e.what();
    out.ok = false;
    if (out.done == Clock::time_point{}) out.done = Clock::now();
  }
  {
    // Counted as done also when it failed, so that the main thread does not wait for it.
    std::lock_guard lock(ctl.mutex);
    if (counted < 1) ++ctl.connected;
    if (counted < 2) ++ctl.granted;
    ++ctl.joined;
    ctl.main_cv.notify_one();
  }
  if (!out.ok || ctl.abort) return;
  // At once, NodeLink::watch's steps in etcd mode: the lease key once (with the node's lease),
  // then a keep_alive per lease interval and a wait for the stop notice in between.
  try {
    cluster::NodeLease node_lease{cluster::lease_prefix(0) + std::to_string(out.node_rank), lease};
    const int attempt = cluster::attempt_id(0, 0);
    const auto interval = cluster::lease_interval(s.node_timeout);
    bool moved = false;
    for (;;) {
      cluster::refresh_lease(*store, node_lease);
      if (ctl.victim.load() == out.node_rank) {
        out.last_refresh = Clock::now();
        if (ctl.death == Death::Revoke) {
          out.died = Clock::now();
          store->revoke(lease);
        } else {
          out.died = out.last_refresh;
        }
        return;  // the connections close with the client
      }
      if (cluster::await_notice(*store, attempt, interval).published) break;
      if (ctl.abort) break;
      if (const auto port = ctl.run_port.load(); port != 0 && !moved) {
        // The running phase's traffic goes through the counting proxy from now on.
        store.reset();
        store = connect_agent(port, s.reply_timeout);
        moved = true;
      }
    }
  } catch (const std::exception& e) {
    out.run_error = e.what();
  }
}

// Starts the agents, the coordinator having been elected; stops them (and joins their threads)
// when it goes.
class Agents {
 public:
  Agents(const AgentSettings& s, Control& ctl) : m_ctl(ctl), m_results(static_cast<std::size_t>(s.n)) {
    m_threads.reserve(static_cast<std::size_t>(s.n));
    for (int i = 0; i < s.n; ++i) {
      m_threads.emplace_back(agent_main, i, std::cref(s), std::ref(ctl),
                             std::ref(m_results[static_cast<std::size_t>(i)]));
    }
  }
  ~Agents() {
    {
      std::lock_guard lock(m_ctl.mutex);
      m_ctl.abort = true;
    }
    m_ctl.agents_cv.notify_all();
    join();
  }
  Agents(const Agents&) = delete;
  Agents& operator=(const Agents&) = delete;
  void join() {
    for (auto& t : m_threads) {
      if (t.joinable()) t.join();
    }
  }
  const std::vector<AgentResult>& results() const { return m_results; }

 private:
  Control& m_ctl;
  std::vector<AgentResult> m_results;
  std::vector<std::thread> m_threads;
};

// Waits until `field` (under ctl.mutex) reaches n; false after `timeout`.
bool wait_count(Control& ctl, int& field, int n, milliseconds timeout) {
  std::unique_lock lock(ctl.mutex);
  return ctl.main_cv.wait_for(lock, timeout, [&] { return field >= n; });
}

int count_of(Control& ctl, const int& field) {
  std::lock_guard lock(ctl.mutex);
  return field;
}

void set_stage(Control& ctl, int stage) {
  {
    std::lock_guard lock(ctl.mutex);
    ctl.stage = stage;
  }
  ctl.agents_cv.notify_all();
}

void write_key(std::uint16_t port, const std::string& key, const std::string& value) {
  rdzv::EtcdOptions o;
  o.connect_timeout = std::chrono::seconds(10);
  o.timeout = std::chrono::seconds(30);
  rdzv::EtcdClient(k_host, port, k_prefix, o).set(key, value);
}

std::string first_error(const std::vector<AgentResult>& results, int* failed) {
  std::string first;
  *failed = 0;
  for (const auto& a : results) {
    if (!a.ok) {
      ++*failed;
      if (first.empty()) first = a.error;
    }
  }
  return first;
}

// --- 1 and 2: rendezvous, then the running job ---------------------------------------------------

struct RendezvousRow {
  int n = 0;
  double connect_ms = 0;                             // first thread started -> every agent connected
  double grant_ms = 0;                               // every agent granted its lease
  double first_join_ms = 0;                          // release -> the coordinator's watch shows the first join/
  double last_join_ms = 0;                           // ... the last join/
  double close_ms = 0;                               // ... the RoundHost closed the round
  double writer_ms = 0;                              // close -> the watch shows the last member's assign/
  double first_round_ms = 0;                         // release -> the first agent holds its RoundRecord
  double rdzv_ms = 0;                                // release -> the last agent holds its RoundRecord
  double calls_per_node = 0;                         // etcd's gRPC calls, release -> last RoundRecord, / N
  std::array<double, k_methods.size()> by_method{};  // per node
  double etcd_cpu_ms = 0;
  double io_cpu_ms = 0;
  double map_bytes = 0;
  double join_put_ms = 0;     // release -> the last agent's PUT join/ returned
  double assign_seen_ms = 0;  // release -> the last agent's wait for assign/ returned
  double agent_calls = 0;     // LinkStore calls per agent (its lease grant included)
  int lefts = 0;              // join/ keys deleted (a lease lapsed) during the rendezvous
  int failed = 0;             // agents with no usable round
  int lease_failed = 0;       // agents that failed once running (their lease lapsed while they waited)
};

struct LeaseRow {
  int n = 0;
  double window_s = 0;
  double interval_s = 0;
  double http_per_node_s = 0;
  double keepalive = 0, txn = 0, watch = 0, other = 0;  // HTTP requests per node per second
  double connections_per_node_s = 0;
  double bytes_up_per_node_s = 0;
  double bytes_down_per_node_s = 0;
  double grpc_calls_per_node_s = 0;  // etcd's count, the coordinator's share included
  double grpc_in_per_node_s = 0, grpc_out_per_node_s = 0;
  double etcd_cpu_us_per_node_s = 0;
  double io_cpu_us_per_node_s = 0;
  double proxy_cpu_us_per_node_s = 0;
  double etcd_idle_cpu_ms_s = 0;  // etcd's CPU per second with the coordinator alone
  int lost = 0;
};

struct RunResult {
  std::optional<RendezvousRow> rdzv;
  std::optional<LeaseRow> lease;
  std::string error;
};

RunResult run_once(int n, bool with_leases, const Args& args) {
  RunResult result;
  EtcdServer etcd(args.etcd, args.tmp);
  const auto node_timeout = ms_of(args.node_timeout_s);
  const auto interval = cluster::lease_interval(node_timeout);
  cluster::RoundRules rules;
  rules.min_nodes = n;
  rules.max_nodes = n;
  rules.last_call = std::chrono::seconds(30);
  rules.join_timeout = std::chrono::seconds(600);
  Coordinator coordinator(etcd.port(), node_timeout, rules);
  if (!coordinator.wait_elected(std::chrono::seconds(30))) {
    result.error = "the coordinator was not elected within 30 s: " + coordinator.trace().failed;
    return result;
  }
  double idle_cpu_ms_s = -1;
  if (with_leases) {
    // etcd's own share (raft ticks, the coordinator's lease and watch) before any agent.
    const double c0 = etcd.cpu_s();
    std::this_thread::sleep_for(std::chrono::seconds(3));
    idle_cpu_ms_s = (etcd.cpu_s() - c0) / 3 * 1000;
  }
  Control ctl;
  AgentSettings settings;
  settings.n = n;
  settings.port = etcd.port();
  settings.node_timeout = node_timeout;
  settings.reply_timeout =
      args.reply_timeout_s > 0 ? ms_of(args.reply_timeout_s) : std::max(milliseconds(300), node_timeout / 3);
  settings.poll = ms_of(args.poll_s);
  settings.waiting_keep_alive = args.waiting_keep_alive;
  const auto t_spawn = Clock::now();
  std::optional<Agents> agents;
  try {
    agents.emplace(settings, ctl);
  } catch (const std::system_error& e) {
    result.error = "could not start " + std::to_string(n) + " agent threads: " + e.what();
    return result;
  }
  if (!wait_count(ctl, ctl.connected, n, std::chrono::seconds(120))) {
    result.error =
        "only " + std::to_string(count_of(ctl, ctl.connected)) + " of " + std::to_string(n) + " agents connected";
    return result;
  }
  const auto t_connected = Clock::now();
  set_stage(ctl, 1);
  if (!wait_count(ctl, ctl.granted, n, std::chrono::seconds(120))) {
    result.error =
        "only " + std::to_string(count_of(ctl, ctl.granted)) + " of " + std::to_string(n) + " agents got a lease";
    return result;
  }
  const auto t_granted = Clock::now();
  const auto m0 = read_metrics(etcd);
  const double io0 = coordinator.io_cpu_s();
  const auto t_release = Clock::now();
  set_stage(ctl, 2);
  // Progress on stderr every 5 s while it lasts; given up after --rdzv-limit.
  const auto progress = [&] {
    const auto t = coordinator.trace();
    return std::to_string(count_of(ctl, ctl.joined)) + " of " + std::to_string(n) +
           " agents answered; the coordinator saw " + std::to_string(t.joins) + " joins, " + std::to_string(t.lefts) +
           " joins deleted (their lease lapsed), " + std::to_string(t.assigns) + " answers" +
           (t.closed ? ", the round closed" : "") +
           (t.failed.empty() ? std::string() : "; coordinating failed: " + t.failed);
  };
  bool all_joined = false;
  for (auto waited = milliseconds(0); waited < ms_of(args.rdzv_limit_s); waited += std::chrono::seconds(5)) {
    if ((all_joined = wait_count(ctl, ctl.joined, n, std::chrono::seconds(5)))) break;
    std::fprintf(stderr, "N=%d, %.0f s after the release: %s\n", n, ms_between(t_release, Clock::now()) / 1000,
                 progress().c_str());
  }
  if (!all_joined) {
    result.error = "no round within " + std::to_string(static_cast<int>(args.rdzv_limit_s)) + " s: " + progress();
    const auto log = etcd.log_tail();
    if (!log.empty()) std::fprintf(stderr, "etcd's log, its end:\n%s\n", log.c_str());
    ctl.abort = true;
    return result;
  }
  const auto m1 = read_metrics(etcd);
  const double io1 = coordinator.io_cpu_s();
  const auto t = coordinator.trace();
  {
    RendezvousRow row;
    row.n = n;
    Clock::time_point first = Clock::time_point::max(), last{}, last_put{}, last_assign{};
    double calls = 0;
    for (const auto& a : agents->results()) {
      first = std::min(first, a.done);
      last = std::max(last, a.done);
      if (a.join_put) last_put = std::max(last_put, *a.join_put);
      if (a.assign_seen) last_assign = std::max(last_assign, *a.assign_seen);
      calls += static_cast<double>(a.calls.load(std::memory_order_relaxed));
    }
    row.join_put_ms = ms_between(t_release, last_put);
    row.assign_seen_ms = ms_between(t_release, last_assign);
    row.agent_calls = calls / n;
    const auto first_error_text = first_error(agents->results(), &row.failed);
    if (row.failed > 0) result.error = std::to_string(row.failed) + " agents got no round: " + first_error_text;
    const auto d = m1 - m0;
    row.connect_ms = ms_between(t_spawn, t_connected);
    row.grant_ms = ms_between(t_connected, t_granted);
    row.first_join_ms = ms_or_none(t_release, t.first_join);
    row.last_join_ms = ms_or_none(t_release, t.last_join);
    row.close_ms = ms_or_none(t_release, t.closed);
    row.writer_ms = ms_or_none(t.closed, t.last_assign);
    row.first_round_ms = ms_between(t_release, first);
    row.rdzv_ms = ms_between(t_release, last);
    row.calls_per_node = d.started_all / n;
    for (std::size_t i = 0; i < k_methods.size(); ++i) row.by_method[i] = d.started[i] / n;
    row.etcd_cpu_ms = d.cpu_s * 1000;
    row.io_cpu_ms = (io1 - io0) * 1000;
    row.map_bytes = static_cast<double>(t.map_bytes);
    row.lefts = t.lefts;
    result.rdzv = row;
  }
  // The agents that failed once running: their lease lapsed while they waited for their answer.
  const auto end_job = [&] {
    write_key(etcd.port(), cluster::stop_key(cluster::attempt_id(0, 0)), "bench over");
    agents->join();
    std::string first_run_error;
    for (const auto& a : agents->results()) {
      if (a.run_error.empty()) continue;
      ++result.rdzv->lease_failed;
      if (first_run_error.empty()) first_run_error = a.run_error;
    }
    if (!first_run_error.empty() && result.error.empty()) {
      result.error = std::to_string(result.rdzv->lease_failed) + " agents failed once running: " + first_run_error;
    }
  };
  if (!result.error.empty()) return result;  // ~Agents ends them
  if (!with_leases) {
    end_job();
    return result;
  }

  // The running job, through the counting proxy.
  CountingProxy proxy(etcd.port());
  const auto window = ms_of(args.window_s);
  // Every agent moves to the proxy within a lease interval (after its wait); the window starts
  // an interval after that.
  ctl.run_port = proxy.port();
  const auto window_start = Clock::now() + 2 * interval;
  std::this_thread::sleep_until(window_start);
  const auto p0 = proxy.counts();
  const auto w0 = read_metrics(etcd);
  const double wio0 = coordinator.io_cpu_s(), pcpu0 = proxy.cpu_s();
  std::this_thread::sleep_until(window_start + window);
  const auto p1 = proxy.counts();
  const auto w1 = read_metrics(etcd);
  const double wio1 = coordinator.io_cpu_s(), pcpu1 = proxy.cpu_s();
  // The job ends: the stop notice wakes every node's wait.
  end_job();
  const double per = 1.0 / (n * args.window_s);
  const auto req = [&](std::size_t i) { return static_cast<double>(p1.requests[i] - p0.requests[i]) * per; };
  LeaseRow row;
  row.n = n;
  row.window_s = args.window_s;
  row.interval_s = std::chrono::duration<double>(interval).count();
  row.http_per_node_s = static_cast<double>(p1.all_requests() - p0.all_requests()) * per;
  row.keepalive = req(4);
  row.txn = req(2);
  row.watch = req(7);
  row.other = std::max(0.0, row.http_per_node_s - row.keepalive - row.txn - row.watch);
  row.connections_per_node_s = static_cast<double>(p1.connections - p0.connections) * per;
  row.bytes_up_per_node_s = static_cast<double>(p1.up - p0.up) * per;
  row.bytes_down_per_node_s = static_cast<double>(p1.down - p0.down) * per;
  const auto wd = w1 - w0;
  row.grpc_calls_per_node_s = wd.started_all * per;
  row.grpc_in_per_node_s = wd.grpc_in_bytes * per;
  row.grpc_out_per_node_s = wd.grpc_out_bytes * per;
  row.etcd_cpu_us_per_node_s = wd.cpu_s * 1e6 * per;
  row.io_cpu_us_per_node_s = (wio1 - wio0) * 1e6 * per;
  row.proxy_cpu_us_per_node_s = (pcpu1 - pcpu0) * 1e6 * per;
  row.etcd_idle_cpu_ms_s = idle_cpu_ms_s;
  row.lost = coordinator.trace().lost;
  if (const auto e = proxy.error(); !e.empty() && result.error.empty()) result.error = "proxy: " + e;
  result.lease = row;
  return result;
}

// --- 3: a node's death -------------------------------------------------------------------------------

struct DeathRow {
  Death mode = Death::Silent;
  int run = 0;
  double lapsed_ms = -1;   // from the death's reference point to the lease key's deletion in the watch
  double restart_ms = -1;  // ... to the RoundHost's restart hook
  std::string why;
  std::string error;
};

DeathRow run_death(Death mode, int run, const Args& args) {
  DeathRow row;
  row.mode = mode;
  row.run = run;
  const int n = args.death_nodes;
  EtcdServer etcd(args.etcd, args.tmp);
  const auto node_timeout = ms_of(args.death_timeout_s);
  cluster::RoundRules rules;
  rules.min_nodes = n;
  rules.max_nodes = n;
  rules.last_call = std::chrono::seconds(30);
  rules.join_timeout = std::chrono::seconds(600);
  Coordinator coordinator(etcd.port(), node_timeout, rules);
  if (!coordinator.wait_elected(std::chrono::seconds(30))) {
    row.error = "the coordinator was not elected within 30 s";
    return row;
  }
  Control ctl;
  ctl.death = mode;
  AgentSettings settings;
  settings.n = n;
  settings.port = etcd.port();
  settings.node_timeout = node_timeout;
  settings.reply_timeout =
      args.reply_timeout_s > 0 ? ms_of(args.reply_timeout_s) : std::max(milliseconds(300), node_timeout / 3);
  Agents agents(settings, ctl);
  const auto fail = [&](std::string why) {
    row.error = std::move(why);
    return row;
  };
  if (!wait_count(ctl, ctl.connected, n, std::chrono::seconds(60))) return fail("agents did not connect");
  set_stage(ctl, 1);
  if (!wait_count(ctl, ctl.granted, n, std::chrono::seconds(60))) return fail("agents got no lease");
  set_stage(ctl, 2);
  if (!wait_count(ctl, ctl.joined, n, std::chrono::seconds(60))) return fail("no round formed");
  int failed = 0;
  if (auto e = first_error(agents.results(), &failed); failed > 0) return fail(std::move(e));
  // A few lease intervals of a running job, then node rank N-1 dies at its next refresh.
  std::this_thread::sleep_for(std::chrono::seconds(2));
  ctl.victim = n - 1;
  auto t = coordinator.trace();
  const auto deadline = Clock::now() + node_timeout + std::chrono::seconds(15);
  while (!t.restart && Clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(5));
    t = coordinator.trace();
  }
  write_key(etcd.port(), cluster::stop_key(cluster::attempt_id(0, 0)), "bench over");
  agents.join();
  for (const auto& a : agents.results()) {
    if (!a.run_error.empty() && a.node_rank != n - 1) return fail("a running agent failed: " + a.run_error);
  }
  const AgentResult* victim = nullptr;
  for (const auto& a : agents.results()) {
    if (a.node_rank == n - 1) victim = &a;
  }
  if (!victim || !victim->died || !victim->last_refresh) return fail("the victim did not die");
  const auto from = mode == Death::Silent ? *victim->last_refresh : *victim->died;
  row.lapsed_ms = ms_or_none(from, t.lapsed);
  row.restart_ms = ms_or_none(from, t.restart);
  row.why = t.restart_why;
  if (!t.restart) row.error = "no restart decision within the node timeout + 15 s";
  return row;
}

// --- 4: the writer alone ---------------------------------------------------------------------

struct WriterRow {
  int n = 0;
  double total_ms = 0;
  double fsyncs_per_put = 0;
};

WriterRow writer_alone(int n, const Args& args) {
  EtcdServer etcd(args.etcd, args.tmp);
  // The coordinator's options (EtcdCoordinator::connect) at the default node timeout.
  rdzv::EtcdOptions options;
  options.connect_timeout = std::max(milliseconds(300), ms_of(args.node_timeout_s) / 3);
  options.timeout = options.connect_timeout;
  options.user_timeout = options.connect_timeout;
  rdzv::EtcdClient client(k_host, etcd.port(), k_prefix, options);
  std::vector<std::pair<std::string, std::string>> writes;
  for (int i = 0; i < n; ++i) {
    writes.emplace_back(cluster::assign_key(bench_node(i).instance), cluster::encode(cluster::Assignment{0, i, n, 2}));
  }
  client.set("warm-up", "1");
  const auto m0 = read_metrics(etcd);
  const auto t0 = Clock::now();
  client.set_many(writes);
  const auto t1 = Clock::now();
  const auto m1 = read_metrics(etcd);
  WriterRow row;
  row.n = n;
  row.total_ms = ms_between(t0, t1);
  row.fsyncs_per_put = (m1.fsyncs - m0.fsyncs) / n;
  return row;
}

double median(std::vector<double> v) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

const char* death_name(Death d) { return d == Death::Silent ? "silent" : "revoke"; }

}  // namespace

int main(int argc, char** argv) {
  Args args;
  if (const char* t = std::getenv("TMPDIR"); t && *t) args.tmp = t;
  if (args.tmp.empty()) args.tmp = "/tmp";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      return argv[++i];
    };
    if (a == "--sizes") {
      args.sizes = parse_list(next());
    } else if (a == "--lease-sizes") {
      args.lease_sizes = parse_list(next());
    } else if (a == "--writer-sizes") {
      args.writer_sizes = parse_list(next());
    } else if (a == "--repeat") {
      args.repeat = std::stoi(next());
    } else if (a == "--window") {
      args.window_s = std::stod(next());
    } else if (a == "--node-timeout") {
      args.node_timeout_s = std::stod(next());
    } else if (a == "--reply-timeout") {
      args.reply_timeout_s = std::stod(next());
    } else if (a == "--no-waiting-keep-alive") {
      args.waiting_keep_alive = false;
    } else if (a == "--poll") {
      args.poll_s = std::stod(next());
    } else if (a == "--rdzv-limit") {
      args.rdzv_limit_s = std::stod(next());
    } else if (a == "--death-runs") {
      args.death_runs = std::stoi(next());
    } else if (a == "--death-nodes") {
      args.death_nodes = std::stoi(next());
    } else if (a == "--death-timeout") {
      args.death_timeout_s = std::stod(next());
    } else if (a == "--etcd") {
      args.etcd = next();
    } else if (a == "--tmp") {
      args.tmp = next();
    } else {
      std::fprintf(
          stderr,
          "usage: rankrun_elastic_etcd_bench [--sizes 8,64,512,1024,2048] [--lease-sizes 8,64,512,1024,2048]\n"
          "         [--repeat 3] [--window 12] [--node-timeout 15] [--rdzv-limit 60] [--death-runs 3]\n"
          "         [--death-nodes 8] [--death-timeout 3] [--writer-sizes 512,2048] [--reply-timeout 0 (NodeLink's)]\n"
          "         [--poll S] [--no-waiting-keep-alive] [--etcd /usr/bin/etcd] [--tmp DIR]\n");
      return 2;
    }
  }
  if (::access(args.etcd.c_str(), X_OK) != 0) {
    std::fprintf(stderr, "no etcd at %s (--etcd)\n", args.etcd.c_str());
    return 2;
  }
  spdlog::set_level(spdlog::level::warn);
  // Two connections per waiting agent (its requests and its watch) in this process, as many at
  // etcd (which inherits the limit), plus a few.
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &lim);
  }
  ::getrlimit(RLIMIT_NOFILE, &lim);
  std::printf("RLIMIT_NOFILE %llu; %u CPUs; etcd %s; data directories under %s\n",
              static_cast<unsigned long long>(lim.rlim_cur), std::thread::hardware_concurrency(), args.etcd.c_str(),
              args.tmp.c_str());
  std::fflush(stdout);

  std::vector<RendezvousRow> rdzv_rows;
  std::vector<LeaseRow> lease_rows;
  std::vector<std::string> errors;
  for (int n : args.sizes) {
    if (static_cast<rlim_t>(4 * n + 64) > lim.rlim_cur) {
      errors.push_back("N=" + std::to_string(n) + ": needs " + std::to_string(4 * n + 64) +
                       " descriptors, RLIMIT_NOFILE is " + std::to_string(lim.rlim_cur));
      continue;
    }
    const bool want_leases = std::find(args.lease_sizes.begin(), args.lease_sizes.end(), n) != args.lease_sizes.end();
    std::vector<RendezvousRow> reps;
    for (int r = 0; r < args.repeat; ++r) {
      RunResult res;
      try {
        res = run_once(n, want_leases && r == 0, args);
      } catch (const std::exception& e) {
        res.error = e.what();
      }
      if (!res.error.empty()) {
        errors.push_back("N=" + std::to_string(n) + " run " + std::to_string(r + 1) + ": " + res.error);
        std::printf("JSON {\"phase\": \"error\", \"n\": %d, \"run\": %d}\nerror: %s\n", n, r + 1,
                    errors.back().c_str());
      }
      const bool failed = !res.error.empty();
      if (res.rdzv) {
        const auto& x = *res.rdzv;
        std::printf(
            "JSON {\"phase\": \"rendezvous\", \"n\": %d, \"run\": %d, \"connect_ms\": %.1f, \"grant_ms\": %.1f, "
            "\"first_join_ms\": %.1f, \"last_join_ms\": %.1f, \"close_ms\": %.1f, \"writer_ms\": %.1f, \"first_round_ms\": %.1f, "
            "\"rdzv_ms\": %.1f, \"calls_per_node\": %.2f, \"range\": %.2f, \"txn\": %.2f, \"put\": %.2f, \"delete\": %.2f, "
            "\"watch\": %.2f, \"keepalive\": %.2f, \"etcd_cpu_ms\": %.0f, \"io_cpu_ms\": %.1f, \"map_bytes\": %.0f, "
            "\"join_put_ms\": %.1f, \"assign_seen_ms\": %.1f, \"agent_calls\": %.2f, \"lefts\": %d, \"failed\": %d, "
            "\"lease_failed\": %d}\n",
            x.n, r + 1, x.connect_ms, x.grant_ms, x.first_join_ms, x.last_join_ms, x.close_ms, x.writer_ms,
            x.first_round_ms, x.rdzv_ms, x.calls_per_node, x.by_method[0], x.by_method[1], x.by_method[2],
            x.by_method[3], x.by_method[4], x.by_method[5], x.etcd_cpu_ms, x.io_cpu_ms, x.map_bytes, x.join_put_ms,
            x.assign_seen_ms, x.agent_calls, x.lefts, x.failed, x.lease_failed);
        reps.push_back(x);
      }
      if (res.lease) {
        const auto& x = *res.lease;
        std::printf(
            "JSON {\"phase\": \"running\", \"n\": %d, \"window_s\": %.1f, \"interval_s\": %.1f, \"http_per_node_s\": %.4f, "
            "\"keepalive\": %.4f, \"txn\": %.4f, \"watch\": %.4f, \"other\": %.4f, \"connections_per_node_s\": %.4f, "
            "\"bytes_up_per_node_s\": %.1f, \"bytes_down_per_node_s\": %.1f, \"grpc_calls_per_node_s\": %.4f, "
            "\"grpc_in_per_node_s\": %.1f, \"grpc_out_per_node_s\": %.1f, \"etcd_cpu_us_per_node_s\": %.1f, "
            "\"io_cpu_us_per_node_s\": %.2f, \"proxy_cpu_us_per_node_s\": %.1f, \"etcd_idle_cpu_ms_s\": %.1f, \"lost\": %d}\n",
            x.n, x.window_s, x.interval_s, x.http_per_node_s, x.keepalive, x.txn, x.watch, x.other,
            x.connections_per_node_s, x.bytes_up_per_node_s, x.bytes_down_per_node_s, x.grpc_calls_per_node_s,
            x.grpc_in_per_node_s, x.grpc_out_per_node_s, x.etcd_cpu_us_per_node_s, x.io_cpu_us_per_node_s,
            x.proxy_cpu_us_per_node_s, x.etcd_idle_cpu_ms_s, x.lost);
        lease_rows.push_back(x);
      }
      std::fflush(stdout);
      if (failed) break;  // a size that failed once is not run again
    }
    if (!reps.empty()) {
      RendezvousRow m;
      m.n = n;
      const auto med = [&](double RendezvousRow::*field) {
        std::vector<double> v;
        for (const auto& x : reps) v.push_back(x.*field);
        return median(v);
      };
      m.connect_ms = med(&RendezvousRow::connect_ms);
      m.grant_ms = med(&RendezvousRow::grant_ms);
      m.first_join_ms = med(&RendezvousRow::first_join_ms);
      m.last_join_ms = med(&RendezvousRow::last_join_ms);
      m.close_ms = med(&RendezvousRow::close_ms);
      m.writer_ms = med(&RendezvousRow::writer_ms);
      m.first_round_ms = med(&RendezvousRow::first_round_ms);
      m.rdzv_ms = med(&RendezvousRow::rdzv_ms);
      m.calls_per_node = med(&RendezvousRow::calls_per_node);
      for (std::size_t i = 0; i < k_methods.size(); ++i) {
        std::vector<double> v;
        for (const auto& x : reps) v.push_back(x.by_method[i]);
        m.by_method[i] = median(v);
      }
      m.etcd_cpu_ms = med(&RendezvousRow::etcd_cpu_ms);
      m.io_cpu_ms = med(&RendezvousRow::io_cpu_ms);
      m.map_bytes = med(&RendezvousRow::map_bytes);
      m.join_put_ms = med(&RendezvousRow::join_put_ms);
      m.assign_seen_ms = med(&RendezvousRow::assign_seen_ms);
      m.agent_calls = med(&RendezvousRow::agent_calls);
      for (const auto& x : reps) {
        m.lefts = std::max(m.lefts, x.lefts);
        m.failed = std::max(m.failed, x.failed);
        m.lease_failed = std::max(m.lease_failed, x.lease_failed);
      }
      rdzv_rows.push_back(m);
    }
  }

  std::vector<DeathRow> deaths;
  for (const Death mode : {Death::Silent, Death::Revoke}) {
    for (int r = 0; r < args.death_runs; ++r) {
      DeathRow x;
      try {
        x = run_death(mode, r + 1, args);
      } catch (const std::exception& e) {
        x.mode = mode;
        x.run = r + 1;
        x.error = e.what();
      }
      if (!x.error.empty())
        errors.push_back(std::string("death ") + death_name(mode) + " run " + std::to_string(r + 1) + ": " + x.error);
      std::printf(
          "JSON {\"phase\": \"death\", \"mode\": \"%s\", \"run\": %d, \"lapsed_ms\": %.1f, \"restart_ms\": %.1f}\n",
          death_name(mode), r + 1, x.lapsed_ms, x.restart_ms);
      std::fflush(stdout);
      deaths.push_back(x);
    }
  }

  std::vector<WriterRow> writers;
  for (int n : args.writer_sizes) {
    if (n <= 0) continue;
    try {
      const auto x = writer_alone(n, args);
      std::printf("JSON {\"phase\": \"writer\", \"n\": %d, \"total_ms\": %.1f, \"fsyncs_per_put\": %.3f}\n", x.n,
                  x.total_ms, x.fsyncs_per_put);
      writers.push_back(x);
    } catch (const std::exception& e) {
      errors.push_back("writer N=" + std::to_string(n) + ": " + e.what());
    }
    std::fflush(stdout);
  }

  std::printf("\nRendezvous over etcd (min = max = N; median of %d; ms from the release)\n\n", args.repeat);
  std::printf(
      "| N | connect | leases granted | last join PUT returned | coordinator sees first join | ... last join | round "
      "closed | writer: close -> last assign seen | first agent holds its round | last agent holds its round | joins "
      "lapsed / agents failed on their lease |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const auto& x : rdzv_rows) {
    std::printf("| %d | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f%s | %d / %d |\n", x.n,
                x.connect_ms, x.grant_ms, x.join_put_ms, x.first_join_ms, x.last_join_ms, x.close_ms, x.writer_ms,
                x.first_round_ms, x.rdzv_ms, x.failed ? " (agents without a round)" : "", x.lefts, x.lease_failed);
  }
  std::printf("\nThe same rendezvous: CPU (ms), calls, the round's map\n\n");
  std::printf("| N | etcd CPU | io thread CPU | LinkStore calls / agent | map bytes |\n|---|---|---|---|---|\n");
  for (const auto& x : rdzv_rows) {
    std::printf("| %d | %.0f | %.1f | %.2f | %.0f |\n", x.n, x.etcd_cpu_ms, x.io_cpu_ms, x.agent_calls, x.map_bytes);
  }
  std::printf("\netcd's gRPC calls per node during the rendezvous, by method (coordinator's included)\n\n");
  std::printf(
      "| N | Range | Txn | Put | DeleteRange | Watch | LeaseKeepAlive | all |\n|---|---|---|---|---|---|---|---|\n");
  for (const auto& x : rdzv_rows) {
    std::printf("| %d | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |\n", x.n, x.by_method[0], x.by_method[1],
                x.by_method[2], x.by_method[3], x.by_method[4], x.by_method[5], x.calls_per_node);
  }
  if (!lease_rows.empty()) {
    std::printf("\nRunning (node_timeout %.0f s, lease interval %.1f s, window %.0f s; per node per second)\n\n",
                args.node_timeout_s, lease_rows.front().interval_s, args.window_s);
    std::printf(
        "| N | HTTP requests | keepalive | txn | watch | other | TCP connections | bytes to etcd | bytes back | etcd gRPC "
        "calls | etcd gRPC bytes in / out | etcd CPU µs (idle etcd: ms/s) | io thread CPU µs | proxy CPU µs | lost |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (const auto& x : lease_rows) {
      std::printf(
          "| %d | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.1f | %.1f | %.3f | %.1f / %.1f | %.1f (%.1f) | %.2f | %.1f | %d |\n",
          x.n, x.http_per_node_s, x.keepalive, x.txn, x.watch, x.other, x.connections_per_node_s, x.bytes_up_per_node_s,
          x.bytes_down_per_node_s, x.grpc_calls_per_node_s, x.grpc_in_per_node_s, x.grpc_out_per_node_s,
          x.etcd_cpu_us_per_node_s, x.etcd_idle_cpu_ms_s, x.io_cpu_us_per_node_s, x.proxy_cpu_us_per_node_s, x.lost);
    }
  }
  if (!deaths.empty()) {
    std::printf(
        "\nA node's death, %d nodes, node_timeout %.0f s (ms; silent: from the end of its last keep_alive; revoke: "
        "from the start of its revoke)\n\n",
        args.death_nodes, args.death_timeout_s);
    std::printf("| how | run | lease key gone (watch) | restart decision | why |\n|---|---|---|---|---|\n");
    for (const auto& x : deaths) {
      std::printf("| %s | %d | %.1f | %.1f | %s |\n", death_name(x.mode), x.run, x.lapsed_ms, x.restart_ms,
                  x.error.empty() ? x.why.c_str() : x.error.c_str());
    }
  }
  if (!writers.empty()) {
    std::printf("\nThe coordinator's writer alone: N assign/ answers with set_many on one connection\n\n");
    std::printf("| N | total ms | per PUT ms | WAL fsyncs per PUT |\n|---|---|---|---|\n");
    for (const auto& x : writers) {
      std::printf("| %d | %.1f | %.3f | %.2f |\n", x.n, x.total_ms, x.total_ms / x.n, x.fsyncs_per_put);
    }
  }
  for (const auto& e : errors) std::printf("error: %s\n", e.c_str());
  return errors.empty() ? 0 : 1;
}
