#include "launcher/config/gpu_list.hpp"

#include "base/parse_number.hpp"

#include <algorithm>

#include "launcher/base/launch_error.hpp"
#include "launcher/config/options.hpp"

namespace rankrun::launcher {
namespace {

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return {};
  const auto e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

std::vector<std::string> split_commas(const std::string& value) {
  auto out = split_at(value, ',');
  for (auto& piece : out) piece = trim(piece);
  return out;
}

bool parse_uint(const std::string& s, int& out) { return parse_number(s, out) && out >= 0; }

}  // namespace

std::vector<std::string> parse_gpu_flag(const std::string& value) {
  std::vector<std::string> gpus;
  for (const auto& entry : split_commas(value)) {
    if (entry.empty()) {
      throw LaunchError("--gpus '" + value +
                        "' has an empty entry; write a comma-separated list such as --gpus 0,1,2,3");
    }
    const auto dash = entry.find('-');
    int lo = 0;
    int hi = 0;
    if (dash != std::string::npos && parse_uint(entry.substr(0, dash), lo) && parse_uint(entry.substr(dash + 1), hi)) {
      if (hi < lo) {
        throw LaunchError("--gpus range '" + entry + "' runs backwards; write it low-high, e.g. " + std::to_string(hi) +
                          "-" + std::to_string(lo));
      }
      for (int i = lo; i <= hi; ++i) gpus.push_back(std::to_string(i));
    } else {
      gpus.push_back(entry);
    }
  }
  for (std::size_t i = 0; i < gpus.size(); ++i) {
    if (std::find(gpus.begin(), gpus.begin() + static_cast<std::ptrdiff_t>(i), gpus[i]) !=
        gpus.begin() + static_cast<std::ptrdiff_t>(i)) {
      throw LaunchError("--gpus '" + value + "' names GPU " + gpus[i] +
                        " twice; each GPU can be given to one worker only");
    }
  }
  return gpus;
}

std::vector<std::string> parse_cuda_visible_devices(const std::string& value) {
  if (trim(value).empty()) return {};
  auto out = split_commas(value);
  out.erase(std::remove(out.begin(), out.end(), std::string{}), out.end());
  return out;
}

std::string join_gpus(const std::vector<std::string>& gpus) {
  std::string out;
  for (const auto& g : gpus) {
    if (!out.empty()) out += ',';
    out += g;
  }
  return out;
}

}  // namespace rankrun::launcher
