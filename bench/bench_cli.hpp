#pragma once
// The C++ benchmarks' command lines, read with CLI11: --help, and CLI11's own message for an
// unknown option or a bad value.

#include <CLI/CLI.hpp>
#include <cmath>
#include <optional>
#include <string>

namespace rankrun::bench {

/// Reads the command line into `app`'s options. An exit code when the program is to stop there:
/// 0 after --help, 2 (a usage error, as for rankrun) after CLI11's message.
inline std::optional<int> parse_command_line(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  return std::nullopt;
}

/// Whole numbers from `min` (counts and sizes; a list's every item).
inline CLI::Validator at_least(int min) {
  CLI::Validator range = CLI::Range(min, 10000000);
  range.description(">=" + std::to_string(min));
  return range;
}

/// Seconds: a finite number above 0, or from 0 with `zero_too` (where 0 picks a default).
inline CLI::Validator seconds(bool zero_too = false) {
  return CLI::Validator(
      [zero_too](std::string& text) -> std::string {
        double value = 0;
        if (CLI::detail::lexical_cast(text, value) && std::isfinite(value) && (zero_too ? value >= 0 : value > 0))
          return {};
        return "Value " + text + " is not a number of seconds " + (zero_too ? "from 0" : "above 0");
      },
      zero_too ? "SECONDS>=0" : "SECONDS>0");
}

}  // namespace rankrun::bench
