// --log-line-prefix-template: torch's string.Template rules (safe_substitute).
#include <doctest/doctest.h>

#include "launcher/report/line_prefix.hpp"

using namespace rankrun::launcher;

TEST_CASE("the prefix template names the role, the ranks and the host, as torchrun's does") {
  const LinePrefixValues v{"trainer", 5, 1, "gpu07"};
  CHECK(expand_line_prefix("[${role_name}${local_rank}]:", v) == "[trainer1]:");
  CHECK(expand_line_prefix("${hostname}/${rank} ", v) == "gpu07/5 ");
  CHECK(expand_line_prefix("$rank|$local_rank|", v) == "5|1|");
  CHECK(expand_line_prefix("", v).empty());
}

TEST_CASE("unknown names stay as written, $$ is one dollar") {
  const LinePrefixValues v{"default", 0, 0, "h"};
  CHECK(expand_line_prefix("${gpu} $ranked ${rank", v) == "${gpu} $ranked ${rank");
  CHECK(expand_line_prefix("$$rank $", v) == "$rank $");
  CHECK(expand_line_prefix("${} $1", v) == "${} $1");
}
