#include "launcher/report/line_prefix.hpp"

#include <cctype>
#include <optional>

namespace rankrun::launcher {
namespace {

bool starts_name(char c) { return std::isalpha(static_cast<unsigned char>(c)) != 0 || c == '_'; }
bool in_name(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_'; }

std::optional<std::string> value_of(std::string_view name, const LinePrefixValues& v) {
  if (name == "role_name") return v.role_name;
  if (name == "rank") return std::to_string(v.rank);
  if (name == "local_rank") return std::to_string(v.local_rank);
  if (name == "hostname") return v.hostname;
  return std::nullopt;
}

}  // namespace

std::string expand_line_prefix(std::string_view tmpl, const LinePrefixValues& values) {
  std::string out;
  std::size_t i = 0;
  while (i < tmpl.size()) {
    const char c = tmpl[i];
    if (c != '$' || i + 1 == tmpl.size()) {
      out += c;
      ++i;
      continue;
    }
    const char next = tmpl[i + 1];
    if (next == '$') {
      out += '$';
      i += 2;
    } else if (next == '{') {
      const auto close = tmpl.find('}', i + 2);
      const auto name = close == std::string_view::npos ? std::string_view{} : tmpl.substr(i + 2, close - i - 2);
      const auto value = name.empty() ? std::nullopt : value_of(name, values);
      if (value) {
        out += *value;
        i = close + 1;
      } else {
        out += c;  // unknown or unterminated: as written
        ++i;
      }
    } else if (starts_name(next)) {
      std::size_t end = i + 1;
      while (end < tmpl.size() && in_name(tmpl[end])) ++end;
      const auto value = value_of(tmpl.substr(i + 1, end - i - 1), values);
      out += value ? *value : std::string(tmpl.substr(i, end - i));
      i = end;
    } else {
      out += c;
      ++i;
    }
  }
  return out;
}

}  // namespace rankrun::launcher
