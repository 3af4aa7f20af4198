// worker_runtime/error_json: the one error-file format (torch's @record JSON), written by the
// worker runtime and read by the launcher.

#include <doctest/doctest.h>

#include <string>

#include "worker_runtime/error_json.hpp"

using rankrun::worker::ErrorRecord;
using rankrun::worker::format_error_json;
using rankrun::worker::parse_error_json;

namespace {

// What a reader gets back for a message written with `text` in it.
std::string round_trip(const std::string& text) {
  const auto r = parse_error_json(format_error_json({text, "", "1"}));
  REQUIRE_MESSAGE(r, text);
  return r->message;
}

}  // namespace

TEST_CASE("the error file has torch's @record shape") {
  const std::string json = format_error_json({"std::runtime_error: boom", "#0 f()\n#1 main\n", "1700000000"});
  CHECK(json ==
        "{\"message\": {\"message\": \"std::runtime_error: boom\", \"extraInfo\": {\"py_callstack\": "
        "\"#0 f()\\n#1 main\\n\", \"timestamp\": \"1700000000\"}}}\n");
}

TEST_CASE("the writer escapes quotes, backslashes and control characters") {
  const std::string json = format_error_json({"say \"hi\" C:\\path a\nb\tc\rd\b\f", "", "1"});
  CHECK(json.find("say \\\"hi\\\" C:\\\\path a\\nb\\tc\\rd\\b\\f") != std::string::npos);
  const std::string nul = format_error_json({std::string("nul\0byte\x01\x1f", 10), "", "1"});
  CHECK(nul.find("nul\\u0000byte\\u0001\\u001f") != std::string::npos);
  CHECK(format_error_json({"/", "", "1"}).find("\"message\": \"/\"") != std::string::npos);
  // One line: nothing raw below 0x20 but its final newline.
  const std::string all_controls = format_error_json({std::string("\x00\x01\x02\n\x1f\x7f", 6), "\n", "1"});
  for (std::size_t i = 0; i + 1 < all_controls.size(); ++i) {
    CHECK(static_cast<unsigned char>(all_controls[i]) >= 0x20);
  }
  for (const std::string& text : {std::string("say \"hi\""), std::string("C:\\path"), std::string("a\nb\tc\rd\b\f"),
                                  std::string("nul\0byte", 8), std::string("\x01\x1f\x7f")}) {
    CHECK(round_trip(text) == text);
  }
}

TEST_CASE("the writer: valid UTF-8 passes, invalid bytes become U+FFFD") {
  const std::string fffd = "\xef\xbf\xbd";
  CHECK(round_trip("caf\xc3\xa9") == "caf\xc3\xa9");                                            // é
  CHECK(round_trip("\xe4\xb8\xad\xe6\x96\x87") == "\xe4\xb8\xad\xe6\x96\x87");                  // 中文
  CHECK(round_trip("\xf0\x9f\x98\x80") == "\xf0\x9f\x98\x80");                                  // emoji
  CHECK(format_error_json({"caf\xc3\xa9", "", "1"}).find("caf\xc3\xa9") != std::string::npos);  // as it is
  CHECK(round_trip("\xff") == fffd);                                                            // never valid
  CHECK(round_trip("latin1 \xe9!") == "latin1 " + fffd + "!");                                  // lone lead byte
  for (const std::string& bad : {std::string("\xc0\xaf"), std::string("\xed\xa0\x80"), std::string("cut \xe4\xb8")}) {
    // Overlong '/', a surrogate, a sequence cut at the end: replaced, never written raw.
    const auto back = round_trip(bad);
    CHECK(back.find(fffd) != std::string::npos);
    CHECK(back.find(bad) == std::string::npos);
  }
  CHECK(round_trip("cut \xe4\xb8").rfind("cut ", 0) == 0);
}

TEST_CASE("hostile messages stay inside their string") {
  const std::string json = format_error_json({"X: \"}, \"evil\": {\"", "\\\"", "1"});
  CHECK(json.find("\"evil\": {") == std::string::npos);
  CHECK(json.find("X: \\\"}, \\\"evil\\\": {\\\"") != std::string::npos);
  const auto r = parse_error_json(json);
  REQUIRE(r);
  CHECK(r->message == "X: \"}, \"evil\": {\"");
  CHECK(r->traceback == "\\\"");
}

TEST_CASE("failure_message words type and message as torch does") {
  CHECK(rankrun::worker::failure_message("std::runtime_error", "boom") == "std::runtime_error: boom");
  CHECK(rankrun::worker::failure_message("int", "") == "int");
}

TEST_CASE("what the writer writes, the reader reads") {
  const ErrorRecord written{"std::runtime_error: boom \xc3\xa9", "#0 f()\n#1 main\n", "1700000000"};
  const auto r = parse_error_json(format_error_json(written));
  REQUIRE(r);
  CHECK(r->message == written.message);
  CHECK(r->traceback == written.traceback);
  CHECK(r->timestamp == written.timestamp);
}

TEST_CASE("torch's @record error file") {
  const auto r = parse_error_json(
      R"({"message": {"message": "ValueError: boom \u00e9", "extraInfo": {"py_callstack": "Traceback (most recent call last):\n  File \"t.py\", line 3\nValueError: boom", "timestamp": "1700000000"}}})");
  REQUIRE(r);
  CHECK(r->message == "ValueError: boom \xc3\xa9");
  CHECK(r->traceback == "Traceback (most recent call last):\n  File \"t.py\", line 3\nValueError: boom");
  CHECK(r->timestamp == "1700000000");
}

TEST_CASE("the plain-string form, extra fields and errorCode") {
  auto r = parse_error_json(R"({"message": "RuntimeError: x", "timestamp": 12, "other": [1, {"a": null}, true]})");
  REQUIRE(r);
  CHECK(r->message == "RuntimeError: x");
  CHECK(r->timestamp == "12");
  r = parse_error_json(R"({"message": {"message": "E", "errorCode": 3, "extraInfo": {}}})");
  REQUIRE(r);
  CHECK(r->message == "E");
  CHECK(r->traceback.empty());
  CHECK(r->timestamp.empty());
}

TEST_CASE("garbage is not an error record") {
  CHECK_FALSE(parse_error_json(""));
  CHECK_FALSE(parse_error_json("{"));
  CHECK_FALSE(parse_error_json(R"({"message": "x"} trailing)"));
  CHECK_FALSE(parse_error_json(R"({"nomessage": 1})"));
  CHECK_FALSE(parse_error_json(std::string(10000, '[')));
  CHECK_FALSE(parse_error_json(R"({"message": "\q"})"));
  CHECK_FALSE(parse_error_json(R"({"message": 5})"));
  CHECK_FALSE(parse_error_json(R"({"message": ["x"]})"));
  CHECK_FALSE(parse_error_json("[]"));
}

TEST_CASE("the reader's nesting bound") {
  // The record at the top, then arrays nested to the bound in an extra field.
  const auto nested = [](std::size_t depth) {
    return R"({"message": "x", "other": )" + std::string(depth - 1, '[') + std::string(depth - 1, ']') + "}";
  };
  CHECK(parse_error_json(nested(rankrun::worker::k_error_json_max_depth)));
  CHECK_FALSE(parse_error_json(nested(rankrun::worker::k_error_json_max_depth + 1)));
  CHECK_FALSE(parse_error_json(std::string(1000000, '[') + std::string(1000000, ']')));  // no stack overflow
}
