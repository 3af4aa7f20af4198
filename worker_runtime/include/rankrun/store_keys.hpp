#pragma once
// The keys the worker runtime writes to the job's store, and their value formats. This is a
// contract with the launcher: its hang detector reads the heartbeat and collective-record
// keys to tell which rank is where. All keys start with "rankrun/" and never with "/", so
// they cannot collide with torch's keys (which the c10d client prefixes with "/"). The
// launcher gives every restart a fresh key space, so keys carry no attempt number.
//
//   rankrun/hb/<rank>            "<unix_ms> <step>[ calls=<n>][ batches=<epoch>:<read>/<planned>][ section=<since_ms>:<timeout_ms>:<name>]"
//       Written every heartbeat interval by the rank's heartbeat thread (a heartbeat that beats
//       on calls only writes after the trainer called step() or beat() since the last one), and
//       at once when the rank enters or leaves a section. <unix_ms>: wall clock in milliseconds
//       since the epoch when written; <step>: the last value given to step() (-1 before the
//       first call). calls=: a heartbeat that beats on the trainer's calls only counts them (step(),
//       beat(), the data's count): a changed count is progress, as a changed step is.
//       batches=: the data loader's count this epoch (rankrun.data): batches read
//       so far and planned in epoch <epoch>. section=: the rank is inside a section it declared
//       (a checkpoint, an evaluation) since <since_ms> (wall clock), expected to last at most
//       <timeout_ms>; <name>, the rest of the value, has no newline. A launcher that knows
//       neither field reads "<unix_ms> <step>" only when neither is there.
//   rankrun/coll/<rank>          "<kind> #<seq> <enter|exit> <name>"
//       Written when the rank enters and leaves a collective. <kind>: barrier, all_gather or
//       broadcast (join steps are all_gathers named "join:<name>"); <seq>: the collective's
//       1-based number in this rank's sequence (the same on every rank for the same call
//       when the ranks' programs agree); <name>: the caller's name for it, the rest of the
//       value (may contain spaces). A rank whose last record is "enter" is inside that
//       collective; ranks with different <seq> are at different points of the program.
//   rankrun/worker/<group>/<seq>/r<rank>   "<kind> <name>\n<payload>"   arrival + data
//   rankrun/worker/<group>/<seq>/count     ADD counter of arrivals
//   rankrun/worker/<group>/<seq>/done      "ok", or "mismatch\n<description>"
//       The collectives' own exchange (see collectives.hpp); the last rank to arrive writes
//       `done`. A collective's keys are deleted once every rank has moved past it.
// Public header: C++17.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace rankrun {

inline constexpr std::string_view k_store_key_prefix = "rankrun/";
/// "rankrun/hb/<rank>": a rank's heartbeat; "rankrun/coll/<rank>": its collective record.
inline constexpr std::string_view k_heartbeat_prefix = "rankrun/hb/";
inline constexpr std::string_view k_collective_prefix = "rankrun/coll/";

std::string heartbeat_key(int rank);
std::string collective_record_key(int rank);
/// The rank in a key made of `prefix` and a rank ("rankrun/hb/3" -> 3); nullopt otherwise.
std::optional<int> rank_in_key(std::string_view key, std::string_view prefix);
/// "rankrun/worker/<group>/<seq>/" (with the trailing slash).
std::string collective_key_base(std::string_view group, std::uint64_t seq);

/// A section a rank declared: while inside it and for at most `timeout_ms`, it is working.
struct SectionValue {
  std::int64_t since_ms = 0;  ///< wall clock, when it entered
  std::int64_t timeout_ms = 0;
  std::string name;
};
/// How far a rank read its data in an epoch (rankrun.data).
struct BatchCount {
  std::uint64_t epoch = 0;
  std::uint64_t read = 0;
  std::uint64_t planned = 0;
};
/// A section's name is cut to this many bytes.
inline constexpr std::size_t k_max_section_name = 200;

struct HeartbeatValue {
  std::int64_t unix_ms = 0;
  std::int64_t step = -1;
  std::optional<std::uint64_t> calls;
  std::optional<BatchCount> batches;
  std::optional<SectionValue> section;
};
std::string format_heartbeat(const HeartbeatValue& value);
/// nullopt when `text` is not "<int> <int>" followed by the optional fields above.
std::optional<HeartbeatValue> parse_heartbeat(std::string_view text);

struct CollectiveRecord {
  std::string kind;
  std::uint64_t seq = 0;
  bool entered = true;  ///< "enter" (true) or "exit" (false)
  std::string name;
};
std::string format_collective_record(const CollectiveRecord& record);
/// nullopt when `text` does not have the documented shape.
std::optional<CollectiveRecord> parse_collective_record(std::string_view text);

}  // namespace rankrun
