#include "launcher/host/worker_library.hpp"

#include <algorithm>
#include <filesystem>
#include <system_error>
#include <vector>

namespace rankrun::launcher {
namespace fs = std::filesystem;

namespace {

// The sub-folders of `dir` whose names end with `suffix`, sorted.
std::vector<fs::path> entries_ending(const fs::path& dir, const std::string& suffix) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const auto name = it->path().filename().string();
    if (name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
      out.push_back(it->path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

void add_prefix_lib(std::vector<fs::path>& dirs, const fs::path& lib) {
  for (const auto& arch : entries_ending(lib, "-linux-gnu")) dirs.push_back(arch);
  dirs.push_back(lib);
}

}  // namespace

std::optional<std::string> find_worker_library(const std::string& exe_dir, const std::string& soversion) {
  const fs::path up = fs::path(exe_dir).parent_path();
  std::vector<fs::path> dirs{up / "worker_runtime"};
  add_prefix_lib(dirs, up / "lib");
  dirs.push_back(up / "lib64");
  for (const auto& python : entries_ending(up / "lib", "")) {
    if (python.filename().string().rfind("python3", 0) != 0) continue;
    add_prefix_lib(dirs, python / "site-packages" / "rankrun" / "lib");
  }
  for (const auto& dir : dirs) {
    for (const std::string& name : {"librankrun_worker.so." + soversion, std::string("librankrun_worker.so")}) {
      std::error_code ec;
      const auto candidate = dir / name;
      if (fs::is_regular_file(candidate, ec)) return fs::absolute(candidate, ec).lexically_normal().string();
    }
  }
  return std::nullopt;
}

std::optional<std::string> this_worker_library() {
  std::error_code ec;
  const auto self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return std::nullopt;
  return find_worker_library(self.parent_path().string(), RANKRUN_SOVERSION);
}

}  // namespace rankrun::launcher
