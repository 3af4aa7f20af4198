#pragma once
// torch's flight recorder dumps, matched across ranks: per process group, the first sequence id
// where the ranks part. Pure.
//
// A dump is torch's JSON (_dump_fr_trace_json, _dump_nccl_trace_json): `pg_status` gives each
// group's last collective enqueued, started and completed; `entries` the latest collectives,
// each with its group, `collective_seq_id`, op (`profiling_name`), sizes, dtypes and state.
// Collectives of one group are numbered alike on every member, so at one sequence id every
// member must run the same op on the same sizes and dtypes, and a member whose last enqueued is
// below another's never reached what the other waits in.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rankrun::launcher {

struct FlightEntry {
  std::string group;        // the group's name ("0": the default group)
  std::string desc;         // its description ("default_pg")
  std::int64_t seq = 0;     // collective_seq_id
  std::string op;           // "all_reduce" (the profiling name without its backend)
  std::string backend;      // "gloo", "nccl"
  std::string sizes;        // input sizes, as "[[4, 4]]"
  std::string dtypes;       // input dtypes, as "Float"
  std::string state;        // scheduled, started, completed
  bool retired = false;     // the backend is done with it (gloo: it completed)
  bool sizes_known = true;  // false: only the op is known (another node's summary)
};

struct FlightGroup {
  std::string name;
  std::int64_t enqueued = -1;
  std::int64_t started = -1;  // -1: the backend does not say
  std::int64_t completed = -1;
};

struct FlightDump {
  std::vector<FlightGroup> groups;
  std::vector<FlightEntry> entries;  // collectives only (point-to-point ops are left out)
};

/// Dumps larger than this are not read.
inline constexpr std::size_t k_max_flight_dump = 64u << 20;

/// One dump, or nullopt with `error` set (not JSON, not a dump, too large, too deep). A group's
/// `completed` is raised past `last_completed_collective` over the retired entries that follow
/// it: gloo's two worker threads write that status after each collective, unordered, so the
/// thread that ran collective 2 can overwrite the 3 of the one that ran collective 3 (torch
/// 2.14), while every collective retires its own entry.
std::optional<FlightDump> parse_flight_dump(std::string_view json, std::string& error);

/// Two recorders' dumps of one process (the generic one and NCCL's) as one.
FlightDump merge_flight_dumps(FlightDump a, const FlightDump& b);

/// One rank's dump; nullopt when the rank did not answer.
struct RankFlight {
  int rank = 0;
  std::optional<FlightDump> dump;
  std::string at;  // where its main thread is now ("train.py:88 in step"), "" unknown
};

struct FlightFinding {
  std::string group;            // the group's name
  std::int64_t seq = 0;         // the first sequence id where its members part
  std::string text;             // one sentence
  std::vector<int> look_first;  // the ranks that parted from the others
  bool even = false;            // a mismatch where no side is larger: look_first is a guess
};

struct FlightVerdict {
  std::vector<FlightFinding> findings;  // the groups whose members part, default group first
  std::vector<int> silent;              // ranks without a dump
  /// "Flight recorder: ranks 0-2,4-7 are in all_reduce #1042 of the default group; rank 3 never
  /// enqueued it, its last was broadcast #1041 (now at train.py:88 in step). Look at rank 3
  /// first." with the
  /// other groups' findings and the ranks that did not answer after it; "" with no finding.
  std::string text() const;
};

/// Matches the dumps; an empty verdict when no rank has one.
FlightVerdict match_flight_dumps(const std::vector<RankFlight>& ranks);

}  // namespace rankrun::launcher
