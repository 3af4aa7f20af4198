#pragma once
// torchrun's --log-line-prefix-template (TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE): the prefix of a
// worker's console lines, with Python's string.Template rules as torch applies them
// (safe_substitute): $name and ${name} are replaced when the name is known, left as written when
// not, and $$ is one $. Pure.

#include <string>
#include <string_view>

namespace rankrun::launcher {

/// The values a template may name: ${role_name}, ${rank}, ${local_rank}, ${hostname}.
struct LinePrefixValues {
  std::string role_name;
  int rank = 0;
  int local_rank = 0;
  std::string hostname;
};

std::string expand_line_prefix(std::string_view tmpl, const LinePrefixValues& values);

}  // namespace rankrun::launcher
