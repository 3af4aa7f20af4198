#pragma once
// A process environment, name to value, in order. Pure.

#include <map>
#include <string>

namespace rankrun::launcher {

using EnvMap = std::map<std::string, std::string>;

}  // namespace rankrun::launcher
