#pragma once
// The benchmark's private etcd (/usr/bin/etcd 3.4): one member on two free loopback ports with a
// fresh --data-dir, stopped by its pid; and what its /metrics count.

#include <sys/types.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>

namespace rankrun::bench::etcd_bench {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

const char* const k_host = "127.0.0.1";
const char* const k_prefix = "/rankrun/bench/";

/// A TCP port of 127.0.0.1 free at the moment.
std::uint16_t free_port();

/// user + system CPU seconds of process `pid` (/proc/<pid>/stat, clock ticks).
double process_cpu_s(pid_t pid);

class EtcdServer {
 public:
  EtcdServer(const std::string& binary, const std::string& tmp);
  ~EtcdServer() { stop(); }
  EtcdServer(const EtcdServer&) = delete;
  EtcdServer& operator=(const EtcdServer&) = delete;

  std::uint16_t port() const { return m_port; }
  pid_t pid() const { return m_pid; }
  double cpu_s() const { return m_pid > 0 ? process_cpu_s(m_pid) : 0; }

  // SIGTERM, then SIGKILL after 10 s; the data directory goes.
  void stop();

  std::string log_tail() const;

 private:
  // Up once a range succeeds (the member has elected itself leader); else why not.
  std::string wait_ready();

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

Metrics operator-(const Metrics& a, const Metrics& b);

/// etcd's /metrics now, and its CPU time.
Metrics read_metrics(const EtcdServer& etcd);

}  // namespace rankrun::bench::etcd_bench
