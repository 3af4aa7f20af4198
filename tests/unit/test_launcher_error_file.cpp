#include <doctest/doctest.h>

#include "launcher/report/error_file.hpp"

using namespace rankrun::launcher;

TEST_CASE("torch's @record error file") {
  const auto r = parse_error_file(
      R"({"message": {"message": "ValueError: boom \u00e9", "extraInfo": {"py_callstack": "Traceback (most recent call last):\n  File \"t.py\", line 3\nValueError: boom", "timestamp": "1700000000"}}})");
  REQUIRE(r);
  CHECK(r->message == "ValueError: boom \xc3\xa9");
  CHECK(r->traceback == "Traceback (most recent call last):\n  File \"t.py\", line 3\nValueError: boom");
  CHECK(r->timestamp == "1700000000");
}

TEST_CASE("the plain-string form, extra fields and errorCode") {
  auto r = parse_error_file(R"({"message": "RuntimeError: x", "timestamp": 12, "other": [1, {"a": null}, true]})");
  REQUIRE(r);
  CHECK(r->message == "RuntimeError: x");
  CHECK(r->timestamp == "12");
  r = parse_error_file(R"({"message": {"message": "E", "errorCode": 3, "extraInfo": {}}})");
  REQUIRE(r);
  CHECK(r->message == "E");
}

TEST_CASE("garbage is not an error record") {
  CHECK_FALSE(parse_error_file(""));
  CHECK_FALSE(parse_error_file("{"));
  CHECK_FALSE(parse_error_file(R"({"message": "x"} trailing)"));
  CHECK_FALSE(parse_error_file(R"({"nomessage": 1})"));
  CHECK_FALSE(parse_error_file(std::string(10000, '[')));
  CHECK_FALSE(parse_error_file(R"({"message": "\q"})"));
}
