#pragma once
// Reads the JSON error file a worker writes through torch's @record (or rankrun's worker
// runtime) into TORCHELASTIC_ERROR_FILE. Pure: parses text.
//
// Accepted forms (torch's error_handler):
//   {"message": {"message": "ValueError: boom", "extraInfo": {"py_callstack": "...", "timestamp": "1700000000"}}}
//   {"message": "ValueError: boom", "timestamp": 1700000000}

#include <optional>
#include <string>
#include <string_view>

namespace rankrun::launcher {

struct ErrorRecord {
  std::string message;
  std::string traceback;
  std::string timestamp;
};

/// nullopt when `text` is not JSON of one of the forms above.
std::optional<ErrorRecord> parse_error_file(std::string_view text);

}  // namespace rankrun::launcher
