#pragma once
// A counting TCP proxy in front of the private etcd: what the running nodes' traffic costs.

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_util.hpp"

namespace rankrun::bench::etcd_bench {

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
  explicit CountingProxy(std::uint16_t target);
  ~CountingProxy();
  CountingProxy(const CountingProxy&) = delete;
  CountingProxy& operator=(const CountingProxy&) = delete;

  std::uint16_t port() const { return m_port; }
  ProxyCounts counts() const;
  double cpu_s() { return thread_cpu_s(m_thread); }
  std::string error() const;

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

  void set_error(const std::string& e);
  void count_requests(Link& link, const char* data, std::size_t n);
  void watch_out(Link& link, int side, bool on);
  // Writes what waits for `side`; false when its socket failed.
  bool flush(Link& link, int side);
  void kill(Link& link);
  void accept_all();
  void run();

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

}  // namespace rankrun::bench::etcd_bench
