// Load generator for TCPStore servers (rankrun-store or torch's own), used by store_bench.py.
//
//   store_loadgen ops     --port P [--protocol 1.13|2.1|newest] [--connections 1,8,32]
//                         [--ops set,get,add] [--seconds 1]
//     One thread and one StoreClient per connection, each doing the op back to back.
//     Prints one JSON object per (op, connections): ops_per_s, p50_us, p99_us.
//     With --depth D > 1 (get and add only), each connection instead keeps D requests in flight
//     on a raw socket (pipelining, which torch's clients never do): the server's own capacity.
//   store_loadgen barrier --port P [--protocol ...] [--clients 256,1024,4096] [--repeat 3]
//     N simulated clients from one thread (non-blocking sockets, epoll): connect, ADD a shared
//     counter, WAIT on a key that the client whose ADD returned N sets. Prints the time from the
//     first connect to the last STOP_WAITING (median of --repeat runs).
//     --per-source K binds the clients, K per address, to 127.2.0.1, 127.2.0.2, ... (as clients
//     come from many nodes; the store takes at most 1024 connections from one address by
//     default). Each run also reports the host's TcpExt ListenOverflows and ListenDrops counted
//     during it (this network namespace's; nonzero means connections were dropped and retried).

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_cli.hpp"
#include "bench/bench_util.hpp"
#include "rendezvous/store_client.hpp"
#include "rendezvous/wire.hpp"

namespace rdzv = rankrun::rendezvous;
using Clock = std::chrono::steady_clock;

namespace {

struct Args {
  std::string mode;
  std::string host = "127.0.0.1";
  std::uint16_t port = 0;
  std::string protocol = "newest";
  std::vector<int> connections{1, 8, 32};
  std::vector<std::string> ops{"set", "get", "add"};
  double seconds = 1.0;
  std::vector<int> clients{256, 1024, 4096};
  int repeat = 3;
  int depth = 1;
  int per_source = 0;      // barrier: clients per source address (0: the kernel chooses the source)
  bool latencies = false;  // also print every latency (µs), for callers that pool several runs
};

// The command line into `a`; an exit code when the program is to stop there (--help, a bad option).
std::optional<int> parse(Args& a, int argc, char** argv) {
  using rankrun::bench::at_least;
  CLI::App app{"Load generator for TCPStore servers (rankrun-store or torch's own), used by store_bench.py.",
               "store_loadgen"};
  app.add_option("mode", a.mode, "ops: each connection's ops back to back; barrier: N simulated clients' barrier")
      ->required()
      ->check(CLI::IsMember({"ops", "barrier"}));
  app.add_option("--host", a.host, "the server's IPv4 address")->check(CLI::ValidIPV4)->capture_default_str();
  app.add_option("--port", a.port, "the server's port")->required()->check(CLI::Range(1, 65535));
  app.add_option("--protocol", a.protocol, "the clients' torch generation")
      ->check(CLI::IsMember({"1.13", "2.0", "2.1", "2.2", "newest"}))
      ->capture_default_str();
  app.add_option("--connections", a.connections, "ops: connections, comma-separated")
      ->delimiter(',')
      ->check(at_least(1))
      ->capture_default_str();
  app.add_option("--ops", a.ops, "ops: the ops, comma-separated")
      ->delimiter(',')
      ->check(CLI::IsMember({"set", "get", "add"}))
      ->capture_default_str();
  app.add_option("--seconds", a.seconds, "ops: seconds of each (op, connections)")
      ->check(rankrun::bench::seconds())
      ->capture_default_str();
  app.add_option("--depth", a.depth, "ops: requests in flight per connection (get and add only above 1)")
      ->check(at_least(1))
      ->capture_default_str();
  app.add_option("--latencies", a.latencies, "ops: 1 also prints every 8th latency")->capture_default_str();
  app.add_option("--clients", a.clients, "barrier: N, comma-separated")
      ->delimiter(',')
      ->check(at_least(1))
      ->capture_default_str();
  app.add_option("--repeat", a.repeat, "barrier: runs per N (median)")->check(at_least(1))->capture_default_str();
  app.add_option("--per-source", a.per_source, "barrier: clients per source address (0: the kernel chooses)")
      ->check(at_least(0))
      ->capture_default_str();
  if (const auto rc = rankrun::bench::parse_command_line(app, argc, argv)) return rc;
  for (const auto& op : a.ops) {
    if (a.depth > 1 && op == "set") throw std::runtime_error("--depth > 1 works with get and add only");
  }
  return std::nullopt;
}

rdzv::ClientProtocol client_protocol(const std::string& p) {
  if (p == "1.13" || p == "2.0") return rdzv::ClientProtocol::V1_13;
  if (p == "2.1") return rdzv::ClientProtocol::V2_1;
  return rdzv::ClientProtocol::Newest;
}

rdzv::Generation generation(const std::string& p) {
  if (p == "1.13" || p == "2.0") return rdzv::Generation::V1_13;
  if (p == "2.1") return rdzv::Generation::V2_1;
  return rdzv::Generation::V2_2;
}

double percentile(std::vector<std::uint32_t>& sorted_ns, double p) {
  if (sorted_ns.empty()) return 0;
  const auto index = static_cast<std::size_t>(p * static_cast<double>(sorted_ns.size() - 1));
  return sorted_ns[index] / 1000.0;
}

int connect_raw(const Args& a) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(a.port);
  if (::inet_pton(AF_INET, a.host.c_str(), &addr.sin_addr) != 1) throw std::runtime_error("--host must be IPv4");
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    throw std::runtime_error(std::string("connect: ") + std::strerror(errno));
  }
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

// One connection keeping `depth` GETs or ADDs in flight until `end`; latencies in `lat`.
void pipelined_connection(const Args& a, const std::string& op, Clock::time_point end,
                          std::vector<std::uint32_t>& lat) {
  const auto g = generation(a.protocol);
  const int fd = connect_raw(a);
  rdzv::Request r;
  r.op = op == "get" ? rdzv::Op::Get : rdzv::Op::Add;
  r.keys = {"/bench/" + op};
  r.number = 1;
  std::string one;
  if (g == rdzv::Generation::V2_2) {
    rdzv::Request v;
    v.op = rdzv::Op::Validate;
    v.number = rdzv::k_validation_magic;
    rdzv::encode_request(v, g, one);
    ::send(fd, one.data(), one.size(), MSG_NOSIGNAL);
    one.clear();
  }
  rdzv::encode_request(r, g, one);
  // Replies have a fixed size here: ADD an i64, GET the u64 length of the 16-byte value + it.
  const std::size_t reply_size = op == "get" ? 8 + 16 : 8;
  std::vector<Clock::time_point> sent_at;  // FIFO of requests in flight
  std::size_t head = 0;
  auto send_n = [&](std::size_t n) {
    std::string batch;
    for (std::size_t i = 0; i < n; ++i) batch += one;
    const auto now = Clock::now();
    for (std::size_t i = 0; i < n; ++i) sent_at.push_back(now);
    if (::send(fd, batch.data(), batch.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(batch.size())) {
      throw std::runtime_error("pipelined send failed");
    }
  };
  send_n(static_cast<std::size_t>(a.depth));
  std::size_t pending_bytes = 0;
  char buf[65536];
  while (head < sent_at.size()) {
    const ssize_t got = ::recv(fd, buf, sizeof(buf), 0);
    if (got <= 0) throw std::runtime_error("pipelined connection closed");
    pending_bytes += static_cast<std::size_t>(got);
    const std::size_t done = pending_bytes / reply_size;
    pending_bytes %= reply_size;
    const auto now = Clock::now();
    for (std::size_t i = 0; i < done; ++i, ++head) {
      lat.push_back(static_cast<std::uint32_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(now - sent_at[head]).count()));
    }
    if (now < end && done > 0) send_n(done);
  }
  ::close(fd);
}

void run_ops(const Args& a) {
  rdzv::ClientOptions options;
  options.protocol = client_protocol(a.protocol);
  options.connect_timeout = std::chrono::seconds(10);
  options.timeout = std::chrono::seconds(30);
  {
    rdzv::StoreClient setup(a.host, a.port, options);
    setup.set("/bench/get", "value-of-sixteen");
  }
  for (const auto& op : a.ops) {
    for (int n : a.connections) {
      std::vector<std::vector<std::uint32_t>> latencies(static_cast<std::size_t>(n));
      std::vector<std::thread> threads;
      std::atomic<int> ready{0};
      std::atomic<bool> go{false};
      Clock::time_point start, stop;
      for (int t = 0; t < n; ++t) {
        threads.emplace_back([&, t] {
          if (a.depth > 1) {
            ++ready;
            while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
            const auto end =
                start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(a.seconds));
            pipelined_connection(a, op, end, latencies[static_cast<std::size_t>(t)]);
            return;
          }
          rdzv::StoreClient c(a.host, a.port, options);
          const std::string key = op == "set" ? "/bench/set/" + std::to_string(t) : "/bench/" + op;
          auto& lat = latencies[static_cast<std::size_t>(t)];
          lat.reserve(1 << 16);
          ++ready;
          while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
          const auto end =
              start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(a.seconds));
          for (;;) {
            const auto t0 = Clock::now();
            if (t0 >= end) break;
            if (op == "set")
              c.set(key, "value-of-sixteen");
            else if (op == "get")
              (void)c.get(key);
            else
              (void)c.add(key, 1);
            lat.push_back(static_cast<std::uint32_t>(
                std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count()));
          }
          if (op == "set") c.num_keys();  // sets have no reply: make sure the server caught up
        });
      }
      while (ready.load() < n) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      start = Clock::now();
      go.store(true, std::memory_order_release);
      for (auto& t : threads) t.join();
      stop = Clock::now();
      std::vector<std::uint32_t> all;
      for (auto& l : latencies) all.insert(all.end(), l.begin(), l.end());
      std::sort(all.begin(), all.end());
      const double elapsed = std::chrono::duration<double>(stop - start).count();
      std::printf(
          "{\"mode\":\"ops\",\"op\":\"%s\",\"connections\":%d,\"depth\":%d,\"ops\":%zu,"
          "\"ops_per_s\":%.0f,\"p50_us\":%.1f,\"p99_us\":%.1f",
          op.c_str(), n, a.depth, all.size(), static_cast<double>(all.size()) / elapsed, percentile(all, 0.50),
          percentile(all, 0.99));
      if (a.latencies) {
        // Every 8th sample keeps the output small while leaving the percentiles intact.
        std::printf(",\"latencies_us\":[");
        for (std::size_t i = 0; i < all.size(); i += 8) std::printf("%s%.1f", i ? "," : "", all[i] / 1000.0);
        std::printf("]");
      }
      std::printf("}\n");
      std::fflush(stdout);
    }
  }
}

// --- barrier -------------------------------------------------------------------------------

// The i-th source address: 127.2.0.1, 127.2.0.2, ..., skipping .0 and .255 in the last byte.
in_addr source_address(int i) {
  const auto index = static_cast<std::uint32_t>(i);
  const std::uint32_t host = (127u << 24) | (2u << 16) | ((index / 254) << 8) | (index % 254 + 1);
  in_addr out{};
  out.s_addr = htonl(host);
  return out;
}

// TcpExt's ListenOverflows and ListenDrops of this network namespace (/proc/net/netstat).
std::pair<long long, long long> listen_drops() {
  std::FILE* f = std::fopen("/proc/net/netstat", "r");
  if (f == nullptr) return {-1, -1};
  std::string names, values;
  char line[8192];
  long long overflows = -1, drops = -1;
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    if (std::strncmp(line, "TcpExt:", 7) != 0) continue;
    if (names.empty()) {
      names = line;
      continue;
    }
    values = line;
    break;
  }
  std::fclose(f);
  std::vector<std::string> n, v;
  auto words = [](const std::string& s, std::vector<std::string>& out) {
    std::size_t i = 0;
    while (i < s.size()) {
      while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
      const std::size_t start = i;
      while (i < s.size() && !std::isspace(static_cast<unsigned char>(s[i]))) ++i;
      if (i > start) out.push_back(s.substr(start, i - start));
    }
  };
  words(names, n);
  words(values, v);
  for (std::size_t i = 0; i < n.size() && i < v.size(); ++i) {
    if (n[i] == "ListenOverflows") overflows = std::stoll(v[i]);
    if (n[i] == "ListenDrops") drops = std::stoll(v[i]);
  }
  return {overflows, drops};
}

struct BarrierRun {
  double ms = 0;
  long long overflows = 0;
  long long drops = 0;
};

struct Sim {
  int fd = -1;
  int stage = 0;  // 0 connecting, 1 awaiting ADD reply, 2 awaiting STOP_WAITING, 3 done
  std::string in;
  std::size_t expect = 0;
};

BarrierRun run_barrier_once(const Args& a, int n, int run_id) {
  const auto g = generation(a.protocol);
  const std::string count_key = "/barrier/" + std::to_string(run_id) + "/count";
  const std::string go_key = "/barrier/" + std::to_string(run_id) + "/go";
  auto encode = [&](rdzv::Op op, std::vector<std::string> keys, std::vector<std::string> values, std::int64_t number) {
    rdzv::Request r;
    r.op = op;
    r.keys = std::move(keys);
    r.values = std::move(values);
    r.number = number;
    std::string out;
    rdzv::encode_request(r, g, out);
    return out;
  };
  std::string hello;
  std::size_t hello_reply = 0;
  if (g == rdzv::Generation::V2_2) {
    hello = encode(rdzv::Op::Validate, {}, {}, rdzv::k_validation_magic) + encode(rdzv::Op::Ping, {}, {}, 1);
    hello_reply = 4;
  }
  const std::string add = hello + encode(rdzv::Op::Add, {count_key}, {}, 1);
  const std::string wait = encode(rdzv::Op::Wait, {go_key}, {}, 0);
  const std::string set_and_wait = encode(rdzv::Op::Set, {go_key}, {"1"}, 0) + wait;

  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(a.port);
  if (::inet_pton(AF_INET, a.host.c_str(), &addr.sin_addr) != 1) throw std::runtime_error("--host must be IPv4");

  const int ep = ::epoll_create1(EPOLL_CLOEXEC);
  std::vector<Sim> sims(static_cast<std::size_t>(n));
  const auto before = listen_drops();
  const auto start = Clock::now();
  for (int i = 0; i < n; ++i) {
    auto& s = sims[static_cast<std::size_t>(i)];
    s.fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (s.fd < 0) throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
    const int one = 1;
    ::setsockopt(s.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (a.per_source > 0) {
      // The port is chosen at connect, per (source, destination): no ephemeral range runs out.
      ::setsockopt(s.fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
      sockaddr_in from{};
      from.sin_family = AF_INET;
      from.sin_addr = source_address(i / a.per_source);
      if (::bind(s.fd, reinterpret_cast<sockaddr*>(&from), sizeof(from)) != 0) {
        throw std::runtime_error(std::string("bind to the source address: ") + std::strerror(errno));
      }
    }
    if (::connect(s.fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 && errno != EINPROGRESS) {
      throw std::runtime_error(std::string("connect: ") + std::strerror(errno));
    }
    epoll_event ev{};
    ev.events = EPOLLOUT;
    ev.data.u32 = static_cast<std::uint32_t>(i);
    ::epoll_ctl(ep, EPOLL_CTL_ADD, s.fd, &ev);
  }
  auto send_all = [](int fd, const std::string& bytes) {
    if (::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(bytes.size())) {
      throw std::runtime_error(std::string("send: ") + std::strerror(errno));
    }
  };
  int released = 0;
  std::vector<epoll_event> events(1024);
  const auto deadline = start + std::chrono::seconds(120);
  while (released < n) {
    if (Clock::now() > deadline)
      throw std::runtime_error("barrier timed out: " + std::to_string(released) + "/" + std::to_string(n));
    const int k = ::epoll_wait(ep, events.data(), static_cast<int>(events.size()), 1000);
    for (int e = 0; e < k; ++e) {
      auto& s = sims[events[static_cast<std::size_t>(e)].data.u32];
      if (s.stage == 0) {
        int err = 0;
        socklen_t len = sizeof(err);
        ::getsockopt(s.fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err != 0) throw std::runtime_error(std::string("connect: ") + std::strerror(err));
        send_all(s.fd, add);
        s.stage = 1;
        s.expect = hello_reply + 8;
        epoll_event ev{};
        ev.events = EPOLLIN;
        ev.data.u32 = events[static_cast<std::size_t>(e)].data.u32;
        ::epoll_ctl(ep, EPOLL_CTL_MOD, s.fd, &ev);
        continue;
      }
      char buf[64];
      const ssize_t got = ::recv(s.fd, buf, sizeof(buf), 0);
      if (got <= 0) throw std::runtime_error("server closed a barrier connection");
      s.in.append(buf, static_cast<std::size_t>(got));
      if (s.in.size() < s.expect) continue;
      if (s.stage == 1) {
        const auto value = rdzv::read_i64(std::string_view(s.in).substr(hello_reply));
        s.in.clear();
        send_all(s.fd, value == n ? set_and_wait : wait);
        s.stage = 2;
        s.expect = 1;
      } else if (s.stage == 2) {
        s.stage = 3;
        ++released;
      }
    }
  }
  BarrierRun run;
  run.ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  const auto after = listen_drops();
  run.overflows = after.first - before.first;
  run.drops = after.second - before.second;
  for (auto& s : sims) ::close(s.fd);
  ::close(ep);
  return run;
}

void run_barrier(const Args& a) {
  const int first_run = static_cast<int>(::getpid()) * 100;
  int run_id = first_run;
  for (int n : a.clients) {
    std::vector<double> times;
    std::string runs;
    long long overflows = 0, drops = 0;
    for (int r = 0; r < a.repeat; ++r) {
      // The server closes the last run's connections first: a burst of connects on top of a
      // burst of closes is not what a barrier meets.
      if (run_id != first_run) std::this_thread::sleep_for(std::chrono::milliseconds(200 + n / 20));
      const BarrierRun run = run_barrier_once(a, n, run_id++);
      times.push_back(run.ms);
      overflows += run.overflows;
      drops += run.drops;
      char one[32];
      std::snprintf(one, sizeof(one), "%s%.1f", runs.empty() ? "" : ",", run.ms);
      runs += one;
    }
    std::sort(times.begin(), times.end());
    std::printf(
        "{\"mode\":\"barrier\",\"clients\":%d,\"per_source\":%d,\"median_ms\":%.1f,\"min_ms\":%.1f,"
        "\"max_ms\":%.1f,\"runs_ms\":[%s],\"listen_overflows\":%lld,\"listen_drops\":%lld}\n",
        n, a.per_source, times[times.size() / 2], times.front(), times.back(), runs.c_str(), overflows, drops);
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  // One descriptor per simulated client: as many as this process may have.
  rankrun::bench::raise_nofile();
  try {
    Args a;
    if (const auto rc = parse(a, argc, argv)) return *rc;
    if (a.mode == "ops")
      run_ops(a);
    else
      run_barrier(a);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "store_loadgen: %s\n", e.what());
    return 1;
  }
  return 0;
}
