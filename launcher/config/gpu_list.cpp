#include "launcher/config/gpu_list.hpp"

#include <algorithm>
#include <climits>

#include "base/range_list.hpp"
#include "base/text.hpp"

#include "launcher/types/launch_error.hpp"
#include "launcher/config/options.hpp"

namespace rankrun::launcher {
namespace {

// The highest GPU index a range may reach: far above any node's GPUs, low enough that a typo
// ("0-70000000") is an error, not millions of GPUs.
constexpr int k_max_gpu_index = 4095;

std::vector<std::string> split_commas(const std::string& value) {
  auto out = split_at(value, ',');
  for (auto& piece : out) piece = std::string(trim_blanks(piece));
  return out;
}

}  // namespace

std::vector<std::string> parse_gpu_flag(const std::string& value) {
  std::vector<std::string> gpus;
  for (const auto& entry : split_commas(value)) {
    if (entry.empty()) {
      throw LaunchError("--gpus '" + value +
                        "' has an empty entry; write a comma-separated list such as --gpus 0,1,2,3");
    }
    // "2-5" is a range; "GPU-8f3c..." (a UUID) is one GPU.
    const auto range = entry.find('-') != std::string::npos ? parse_int_range(entry, INT_MAX) : std::nullopt;
    if (range) {
      const auto [lo, hi] = *range;
      if (hi < lo) {
        throw LaunchError("--gpus range '" + entry + "' runs backwards; write it low-high, e.g. " + std::to_string(hi) +
                          "-" + std::to_string(lo));
      }
      if (hi > k_max_gpu_index) {
        throw LaunchError("--gpus range '" + entry + "' goes past GPU " + std::to_string(k_max_gpu_index) +
                          "; name the GPUs of this node, e.g. --gpus 0-7");
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
  if (trim_blanks(value).empty()) return {};
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
