#pragma once
// The failure record in torch's @record format, so that rankrun's (and torchrun's) report
// shows a native worker's failure exactly like a Python worker's:
//   {"message": {"message": "<Type>: <msg>",
//                "extraInfo": {"py_callstack": "<backtrace>", "timestamp": "<unix seconds>"}}}

#include <cstdint>
#include <string>
#include <string_view>

namespace rankrun::worker {

struct ErrorRecord {
  /// "<Type>: <what>", or just "<Type>" when there is no message.
  std::string message;
  std::string callstack;
  std::int64_t timestamp_s = 0;
};

/// `text` as the inside of a JSON string: quotes, backslashes and control characters
/// escaped, and bytes that are not valid UTF-8 replaced by U+FFFD so that every JSON reader
/// accepts the file (exception messages often carry raw file names).
std::string json_escape(std::string_view text);

/// The whole file, one line, newline-terminated.
std::string format_error_json(const ErrorRecord& record);

/// "<Type>: <what>" as torch words it.
std::string failure_message(std::string_view type, std::string_view what);

}  // namespace rankrun::worker
