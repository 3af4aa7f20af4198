#include <doctest/doctest.h>

#include "worker_runtime/error_json.hpp"

using rankrun::worker::format_error_json;
using rankrun::worker::json_escape;

TEST_CASE("json_escape: quotes, backslashes, control characters") {
  CHECK(json_escape("plain text") == "plain text");
  CHECK(json_escape("say \"hi\"") == "say \\\"hi\\\"");
  CHECK(json_escape("C:\\path") == "C:\\\\path");
  CHECK(json_escape("a\nb\tc\rd") == "a\\nb\\tc\\rd");
  CHECK(json_escape("\b\f") == "\\b\\f");
  CHECK(json_escape(std::string("nul\0byte", 8)) == "nul\\u0000byte");
  CHECK(json_escape("\x01\x1f\x7f") == "\\u0001\\u001f\\u007f");
  CHECK(json_escape("/") == "/");
}

TEST_CASE("json_escape: valid UTF-8 passes, invalid bytes become U+FFFD") {
  CHECK(json_escape("caf\xc3\xa9") == "caf\xc3\xa9");              // é
  CHECK(json_escape("\xe4\xb8\xad\xe6\x96\x87") == "\xe4\xb8\xad\xe6\x96\x87");  // 中文
  CHECK(json_escape("\xf0\x9f\x98\x80") == "\xf0\x9f\x98\x80");    // emoji
  CHECK(json_escape("\xff") == "\\ufffd");                          // never valid
  CHECK(json_escape("latin1 \xe9!") == "latin1 \\ufffd!");          // lone lead byte
  CHECK(json_escape("\xc0\xaf") == "\\ufffd\\ufffd");               // overlong '/'
  CHECK(json_escape("\xed\xa0\x80") == "\\ufffd\\ufffd\\ufffd");    // surrogate
  CHECK(json_escape("cut \xe4\xb8") == "cut \\ufffd\\ufffd");       // truncated at the end
}

TEST_CASE("the error file has torch's @record shape") {
  const std::string json = format_error_json({"std::runtime_error: boom", "#0 f()\n#1 main\n", 1700000000});
  CHECK(json ==
        "{\"message\": {\"message\": \"std::runtime_error: boom\", \"extraInfo\": {\"py_callstack\": "
        "\"#0 f()\\n#1 main\\n\", \"timestamp\": \"1700000000\"}}}\n");
}

TEST_CASE("hostile messages stay inside their string") {
  const std::string json = format_error_json({"X: \"}, \"evil\": {\"", "\\\"", 1});
  CHECK(json.find("\"evil\": {") == std::string::npos);
  CHECK(json.find("X: \\\"}, \\\"evil\\\": {\\\"") != std::string::npos);
}

TEST_CASE("failure_message words type and message as torch does") {
  CHECK(rankrun::worker::failure_message("std::runtime_error", "boom") == "std::runtime_error: boom");
  CHECK(rankrun::worker::failure_message("int", "") == "int");
}
