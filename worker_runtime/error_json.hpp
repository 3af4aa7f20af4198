#pragma once
// The error file in torch's @record format, written by the worker runtime and read by the
// launcher, so that rankrun's (and torchrun's) report shows a native worker's failure exactly
// like a Python worker's. Pure: text in, text out.
//
// Written (and read) as torch writes it:
//   {"message": {"message": "<Type>: <msg>",
//                "extraInfo": {"py_callstack": "<backtrace>", "timestamp": "<unix seconds>"}}}
// Also read, as torch's error_handler accepts it:
//   {"message": "ValueError: boom", "timestamp": 1700000000}

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace rankrun::worker {

struct ErrorRecord {
  /// "<Type>: <what>", or just "<Type>" when there is no message.
  std::string message;
  /// py_callstack: the Python traceback, or a native worker's backtrace.
  std::string traceback;
  /// Unix seconds, as the file wrote them (a string or a number's text).
  std::string timestamp;
};

/// Nesting beyond this makes a file unreadable.
constexpr std::size_t k_error_json_max_depth = 64;

/// The whole file, one line, newline-terminated. Bytes that are not valid UTF-8 become U+FFFD,
/// so that every JSON reader accepts the file (exception messages often carry raw file names).
std::string format_error_json(const ErrorRecord& record);

/// nullopt when `text` is not JSON of one of the forms above (or nests deeper than
/// k_error_json_max_depth). Never throws (but std::bad_alloc).
std::optional<ErrorRecord> parse_error_json(std::string_view text);

/// "<Type>: <what>" as torch words it.
std::string failure_message(std::string_view type, std::string_view what);

}  // namespace rankrun::worker
