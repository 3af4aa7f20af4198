#pragma once
// The JSON rankrun writes (the event log, `rankrun status --json`, the records nodes exchange)
// and reads back, through nlohmann-json: one library, one escaping.

#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace rankrun::launcher {

/// An object keeps its keys in the order they were set, as the documented outputs list them.
using Json = nlohmann::ordered_json;

/// `value` as one line of JSON text. A string's bytes that are not UTF-8 (a worker's output
/// may hold any) become U+FFFD instead of making the line unwritable.
inline std::string json_text(const Json& value) { return value.dump(-1, ' ', false, Json::error_handler_t::replace); }

/// Seconds as the outputs give them, to the millisecond; null when unknown or not finite.
inline Json json_seconds(std::optional<double> seconds) {
  if (!seconds || !std::isfinite(*seconds)) return nullptr;
  return std::round(*seconds * 1000) / 1000;
}

/// A count that may be unknown: null then.
template <class T>
Json json_or_null(const std::optional<T>& value) {
  return value ? Json(*value) : Json(nullptr);
}

}  // namespace rankrun::launcher
