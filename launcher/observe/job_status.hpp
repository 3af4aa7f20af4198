#pragma once
// A running job as `rankrun status`, the event log and the Prometheus metrics show it: what the
// job's rankrun knows now (its state, attempt and round, every node, every rank and the hang
// policy's clocks), and how each shows it. Pure: job/ fills it in, observe/'s servers send it.

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "launcher/types/json.hpp"

namespace rankrun::launcher::observe {

/// The version of what `rankrun status --json`, the event log and the metrics carry; a field
/// added keeps it, a field removed or changed in meaning raises it.
inline constexpr int k_schema = 1;

struct RankStatus {
  int rank = 0;
  int local_rank = 0;
  int node_rank = 0;
  pid_t pid = 0;      // 0: not known here (another node's rank)
  std::string state;  // "running", "exited 0", "exited 3", "killed by SIGKILL", "not started"
  bool running = false;
  std::string in;                       // the collective it is in ("all_reduce"), "" none or unknown
  std::optional<double> still_seconds;  // since it last moved (stack, CPU, output, progress)
  std::string at;                       // its main thread's frame ("train.py:12 in step")
  std::optional<double> cpu_seconds;
  std::optional<std::uint64_t> rss_bytes;
  std::optional<std::uint64_t> gpu_bytes;  // memory NVML says it holds
  std::string gpu;                         // its CUDA_VISIBLE_DEVICES
  std::string cpus;                        // the CPUs --numa-binding gave it ("0-7"); "" not bound
  // What it reported through rankrun.progress or the worker runtime's heartbeat.
  std::optional<std::int64_t> step;
  std::optional<double> steps_per_second;
  std::string section;                    // the section it is in ("checkpoint"), "" none
  std::optional<double> section_seconds;  // how long it has been in it
  std::optional<double> section_timeout;  // the timeout it declared
};

struct NodeStatus {
  int node_rank = 0;
  std::string host;                    // its address
  std::optional<double> lease_age;     // seconds since its lease was refreshed (node 0 knows)
  std::optional<double> progress_age;  // seconds since its progress record came
  bool lost = false;
  bool self = false;  // the node this status comes from
};

struct StoreStatus {
  std::uint64_t connections = 0;
  std::uint64_t keys = 0;
  std::uint64_t bytes = 0;
};

struct JobStatus {
  int schema = k_schema;
  std::string state;  // "rendezvous", "running", "stopping", "cleaning up", "finished"
  std::string entrypoint;
  std::string run_id;
  int node_rank = 0;
  int nnodes = 1;
  int world_size = 0;
  int attempt = 0;  // the attempt's number in the job (restarts so far)
  int max_restarts = 0;
  int round = -1;  // elastic rounds; -1: none
  double uptime_seconds = 0;
  double attempt_seconds = 0;
  /// Whose view the ranks of other nodes come from ("" one node; "node 0" or "progress records").
  std::string view;
  std::vector<NodeStatus> nodes;
  std::vector<RankStatus> ranks;  // by global rank
  // The hang policy: its limits, how long every running rank has been waiting in collectives
  // with none moving (the clock that ends at progress_timeout), and the ranks outside any
  // collective the others wait for (stragglers).
  std::optional<double> progress_timeout;
  std::optional<double> straggler_timeout;
  std::optional<double> stuck_seconds;
  std::vector<int> stragglers;
  std::map<std::string, int> restarts_by_cause;  // "rank failure", "node lost", "membership", ...
  std::optional<StoreStatus> store;              // the store this node hosts
};

/// The hang clocks from the ranks: stuck_seconds when every running rank waits in a collective
/// (the least time since one of them moved), and the running ranks outside any collective while
/// another waits in one (stragglers).
void add_hang_clocks(JobStatus& s);

/// The terminal screen: the job's line, its nodes, a table of its ranks, the hang clocks.
std::string format_status(const JobStatus& s);

/// One JSON object (no newline).
std::string status_json(const JobStatus& s);

/// Prometheus' text exposition format (version 0.0.4), ending with a newline.
std::string prometheus_text(const JobStatus& s);

/// A request to the status socket: one line, at most this long.
inline constexpr std::size_t k_max_status_request = 256;
/// An HTTP request's head, at most this long.
inline constexpr std::size_t k_max_http_request = 8192;

/// The answer to a status request line ("status", "status json", "metrics"); nullopt: malformed.
std::optional<std::string> answer_status_request(std::string_view line, const JobStatus& status);

/// The answer to an HTTP request head, as bytes: "GET /metrics" gets the exposition format, "/" a
/// page naming it, anything else 404, a head that is not HTTP 400; "" (the connection closed
/// unanswered) for a head over k_max_http_request or one that ends before its blank line. Beast
/// parses it and builds the response (observe/http_answer.hpp, which the metrics server uses).
std::string answer_http_request(std::string_view head, const JobStatus& status);

/// One event log line (no newline): {"schema":1,"type":..,"time":"<UTC, ISO 8601>","unix":..,
/// "node":..,<fields>}.
std::string event_line(std::string_view type, double unix_seconds, int node_rank, const Json& fields);

}  // namespace rankrun::launcher::observe
