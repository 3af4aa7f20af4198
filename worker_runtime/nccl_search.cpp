#include "worker_runtime/nccl_search.hpp"

#include <algorithm>

// Paths by hand rather than with std::filesystem, which would raise the libstdc++ the runtime
// needs to GCC 9's (see tools/make-dist.py).

namespace rankrun::worker {

namespace {

// `path`'s folders and file, without "." and empty parts, ".." taken away where it can be.
std::vector<std::string> path_parts(std::string_view path) {
  const bool absolute = !path.empty() && path.front() == '/';
  std::vector<std::string> parts;
  while (!path.empty()) {
    const auto slash = path.find('/');
    const auto part = path.substr(0, slash);
    if (part == "..") {
      if (!parts.empty() && parts.back() != "..")
        parts.pop_back();
      else if (!absolute)  // above the root is the root
        parts.emplace_back(part);
    } else if (!part.empty() && part != ".") {
      parts.emplace_back(part);
    }
    if (slash == std::string_view::npos) break;
    path.remove_prefix(slash + 1);
  }
  return parts;
}

std::string joined_path(bool absolute, const std::vector<std::string>& parts, std::size_t count) {
  std::string out = absolute ? "/" : "";
  for (std::size_t i = 0; i < count; ++i) out += (i ? "/" : "") + parts[i];
  return out.empty() ? "." : out;
}

}  // namespace

const LibrarySpec& nccl_spec() {
  static const LibrarySpec spec{
      "NCCL",
      "RANKRUN_NCCL_LIBRARY",
      {"libnccl.so.2"},
      {"nvidia/nccl/lib/libnccl.so.2"},
      {"lib/libnccl.so.2"},
      "pip install nvidia-nccl-cu12 (CUDA 13: nvidia-nccl-cu13) in this venv, or set LD_LIBRARY_PATH to the folder "
      "of libnccl.so.2, or RANKRUN_NCCL_LIBRARY=/path/to/libnccl.so.2",
      "NCCL 2.14 or newer"};
  return spec;
}

const LibrarySpec& cudart_spec() {
  static const LibrarySpec spec{
      "the CUDA runtime",
      "RANKRUN_CUDART_LIBRARY",
      {"libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0", "libcudart.so"},
      {"nvidia/cu13/lib/libcudart.so.13", "nvidia/cuda_runtime/lib/libcudart.so.12",
       "nvidia/cuda_runtime/lib/libcudart.so.11.0"},
      {"lib/libcudart.so.13", "lib/libcudart.so.12", "lib/libcudart.so.11.0"},
      "pip install nvidia-cuda-runtime-cu12 (CUDA 13: nvidia-cuda-runtime) in this venv, or set LD_LIBRARY_PATH to "
      "the folder of libcudart.so.N (e.g. /usr/local/cuda/lib64), or RANKRUN_CUDART_LIBRARY=/path/to/libcudart.so.N",
      "a CUDA runtime 11 or newer"};
  return spec;
}

std::optional<std::string> enclosing_site_packages(std::string_view file) {
  const auto parts = path_parts(file);
  for (std::size_t n = parts.size(); n-- > 1;) {  // the folders above the file, nearest first
    if (parts[n - 1] == "site-packages" || parts[n - 1] == "dist-packages")
      return joined_path(!file.empty() && file.front() == '/', parts, n);
  }
  return std::nullopt;
}

namespace {

// The folder as a key: "/a/b/" and "/a/./b" are the same place.
std::string folder_key(const std::string& dir) {
  const auto parts = path_parts(dir);
  return joined_path(!dir.empty() && dir.front() == '/', parts, parts.size());
}

std::vector<std::string> split_path_list(std::string_view list) {
  std::vector<std::string> out;
  while (!list.empty()) {
    const auto colon = list.find(':');
    if (colon != 0) out.emplace_back(list.substr(0, colon));
    if (colon == std::string_view::npos) break;
    list.remove_prefix(colon + 1);
  }
  return out;
}

std::string joined(const std::vector<std::string>& items, std::string_view last_word) {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += i + 1 == items.size() ? std::string(" ") + std::string(last_word) + " " : ", ";
    out += items[i];
  }
  return out;
}

}  // namespace

std::vector<PackageDir> python_package_dirs(const NcclSearchInputs& in) {
  std::vector<PackageDir> out;
  const auto add = [&out](const std::string& dir, const char* origin) {
    if (dir.empty()) return;
    const auto key = folder_key(dir);
    const bool seen =
        std::any_of(out.begin(), out.end(), [&](const PackageDir& d) { return folder_key(d.dir) == key; });
    if (!seen) out.push_back({key, origin});
  };
  const auto prefix_site_packages = [&](const std::string& prefix, const char* origin) {
    if (prefix.empty()) return;
    const std::string lib = folder_key(prefix) + "/lib";
    const auto versions = in.python_dirs ? in.python_dirs(lib) : std::vector<std::string>();
    for (const auto& v : versions) add(lib + "/" + v + "/site-packages", origin);
    if (versions.empty()) add(lib + "/python3.*/site-packages", origin);
  };
  prefix_site_packages(in.virtual_env, "VIRTUAL_ENV");
  if (const auto own = enclosing_site_packages(in.runtime_file)) add(*own, "the site-packages of librankrun_worker");
  for (const auto& entry : split_path_list(in.pythonpath)) add(entry, "PYTHONPATH");
  prefix_site_packages(in.conda_prefix, "CONDA_PREFIX");
  return out;
}

std::vector<LibraryCandidate> library_candidates(const LibrarySpec& spec, const NcclSearchInputs& in) {
  using Kind = LibraryCandidate::Kind;
  if (const auto it = in.overrides.find(spec.override_variable); it != in.overrides.end() && !it->second.empty())
    return {{Kind::override_file, spec.override_variable, "", {it->second}}};
  std::vector<LibraryCandidate> out;
  out.push_back({Kind::loaded, "already loaded in this process", "", spec.sonames});
  for (const auto& dir : python_package_dirs(in))
    out.push_back({Kind::files, dir.origin, dir.dir, spec.in_site_packages});
  if (!in.conda_prefix.empty())
    out.push_back({Kind::files, "CONDA_PREFIX", folder_key(in.conda_prefix), spec.in_prefix});
  out.push_back({Kind::by_name, "LD_LIBRARY_PATH, then the system's library path", "", spec.sonames});
  return out;
}

std::string library_not_found_message(const LibrarySpec& spec, const std::vector<LibraryAttempt>& attempts,
                                      const NcclSearchInputs& in) {
  using Kind = LibraryCandidate::Kind;
  std::string out = "cannot load " + spec.what + " (" + joined(spec.sonames, "or") +
                    ") for rankrun::NcclCommunicator; looked, in order:";
  bool python = false;
  for (const auto& [c, outcome] : attempts) {
    if (c.kind == Kind::by_name && !python) {
      out +=
          "\n    no Python environment to look in: VIRTUAL_ENV, PYTHONPATH and CONDA_PREFIX are not set and "
          "librankrun_worker (" +
          (in.runtime_file.empty() ? std::string("its file unknown") : in.runtime_file) + ") is in no site-packages";
    }
    out += "\n    ";
    switch (c.kind) {
      case Kind::override_file:
        out += c.origin + "=" + c.names.front() + ": " + (outcome.empty() ? "no such file" : outcome);
        break;
      case Kind::loaded: out += joined(c.names, "or") + " " + c.origin + ": no"; break;
      case Kind::files:
        python = true;
        out += c.dir + " (" + c.origin + "): " + (outcome.empty() ? "no " + joined(c.names, "or") : outcome);
        break;
      case Kind::by_name:
        out += joined(c.names, "or") + " by name (" +
               (in.ld_library_path.empty() ? std::string("LD_LIBRARY_PATH not set; ")
                                           : "LD_LIBRARY_PATH=" + in.ld_library_path + ", then ") +
               "the system's library path): " + (outcome.empty() ? "not found" : outcome);
        break;
    }
  }
  out += "\n  fix: " + spec.fix;
  return out;
}

std::string missing_symbols_message(const LibrarySpec& spec, const std::string& file, const std::string& origin,
                                    const std::vector<std::string>& symbols) {
  return spec.what + " at " + file + " (" + origin + ") has no " + joined(symbols, "and") +
         ", which rankrun::NcclCommunicator calls: it needs " + spec.needed_version + " (" + spec.fix + ")";
}

std::string nccl_version_text(int code) {
  if (code <= 0) return "unknown";
  const bool old = code < 10000;  // NCCL_VERSION(X, Y, Z) for 2.8 and older: X*1000 + Y*100 + Z
  const int major = old ? code / 1000 : code / 10000;
  const int minor = old ? code % 1000 / 100 : code % 10000 / 100;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(code % 100);
}

}  // namespace rankrun::worker
