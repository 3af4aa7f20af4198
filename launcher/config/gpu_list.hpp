#pragma once
// GPU lists as text: "--gpus 0,1,4-7" and CUDA_VISIBLE_DEVICES. No CUDA calls here.

#include <string>
#include <vector>

namespace rankrun::launcher {

/// Parses `--gpus`: comma-separated device ids; "a-b" expands integer ranges; UUIDs
/// ("GPU-…") and MIG names ("MIG-…") are kept as given. Throws LaunchError on an empty
/// entry, a bad range or a duplicate, naming the value.
std::vector<std::string> parse_gpu_flag(const std::string& value);

/// Splits CUDA_VISIBLE_DEVICES as CUDA reads it: comma-separated, entries kept verbatim
/// (trimmed). An empty string means no GPU is visible.
std::vector<std::string> parse_cuda_visible_devices(const std::string& value);

/// "0,1,2" for messages and for CUDA_VISIBLE_DEVICES under --no-pin.
std::string join_gpus(const std::vector<std::string>& gpus);

}  // namespace rankrun::launcher
