#pragma once
// The benchmark's private etcd (/usr/bin/etcd 3.4): one member on two free loopback ports with a
// fresh --data-dir, stopped by its pid (tests/helpers/etcd_member.hpp); and what its /metrics count.

#include <sys/types.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>

#include "tests/helpers/etcd_member.hpp"

namespace rankrun::bench::etcd_bench {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

const char* const k_host = "127.0.0.1";
const char* const k_prefix = "/rankrun/bench/";

/// user + system CPU seconds of process `pid` (/proc/<pid>/stat).
double process_cpu_s(pid_t pid);

/// One etcd member (tests/helpers/etcd_member.hpp) with etcd's log at warn level.
class EtcdServer {
 public:
  EtcdServer(const std::string& binary, const std::string& tmp);

  std::uint16_t port() const { return m_member.port(); }
  pid_t pid() const { return m_member.pid(); }
  double cpu_s() const { return pid() > 0 ? process_cpu_s(pid()) : 0; }
  std::string log_tail() const { return m_member.log_tail(); }

 private:
  test_helpers::EtcdMember m_member;
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
