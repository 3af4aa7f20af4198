#pragma once
// Pure pieces of the store collectives: arrival values, the agreement check, and the
// wording of timeouts. No store access here.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rankrun::worker {

/// "<kind> <name>": what one rank says it is calling; must match across ranks.
std::string collective_header(std::string_view kind, std::string_view name);

/// "<header>\n<payload>".
std::string format_arrival(std::string_view header, std::string_view payload);

struct Arrival {
  std::string header;
  std::string payload;
};
/// Splits at the first newline; a value without one is all header.
Arrival parse_arrival(std::string_view value);

/// nullopt when every arrival (indexed by rank) has the same header; otherwise a description
/// naming which ranks called what, e.g. "ranks 0,1 called barrier 'a'; rank 2 called
/// all_gather 'b'".
std::optional<std::string> describe_mismatch(const std::vector<std::string>& headers);

/// "2", "2,3", "0-3,7": ascending, runs of three or more as ranges.
std::string format_rank_list(const std::vector<int>& ranks);

/// "5s" for whole seconds, otherwise "1500ms".
std::string format_duration(std::chrono::milliseconds duration);

/// "barrier 'epoch-3' (#5) timed out after 5s: ranks 2,3 of 4 did not arrive".
std::string timeout_message(std::string_view kind, std::string_view name, std::uint64_t seq,
                            std::chrono::milliseconds timeout, const std::vector<int>& missing, int world_size);

}  // namespace rankrun::worker
