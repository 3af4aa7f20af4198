// NCCL and the CUDA runtime, loaded with dlopen when NcclCommunicator is first used: the places
// come from nccl_search.cpp, tried here in its order; the functions from nccl_api.hpp's table.
#include "worker_runtime/nccl_api.hpp"

#include <dirent.h>
#include <dlfcn.h>
#include <link.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "worker_runtime/nccl_search.hpp"

namespace rankrun::worker {

namespace {

std::string env(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

// Its address names this library's file to dladdr.
const char k_anchor = 0;

std::string runtime_file() {
  Dl_info info{};
  if (::dladdr(&k_anchor, &info) != 0 && info.dli_fname) return info.dli_fname;
  return "";
}

// (POSIX rather than std::filesystem, which would raise the libstdc++ the runtime needs.)
std::vector<std::string> python_dirs(const std::string& lib_dir) {
  std::vector<std::string> out;
  DIR* dir = ::opendir(lib_dir.c_str());
  if (!dir) return out;
  while (const dirent* entry = ::readdir(dir)) {
    const std::string name = entry->d_name;
    struct stat st {};
    if (name.rfind("python3", 0) == 0 && ::stat((lib_dir + "/" + name).c_str(), &st) == 0 && S_ISDIR(st.st_mode))
      out.push_back(name);
  }
  ::closedir(dir);
  std::sort(out.begin(), out.end());
  return out;
}

bool exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

NcclSearchInputs search_inputs() {
  NcclSearchInputs in;
  for (const char* name : {"RANKRUN_NCCL_LIBRARY", "RANKRUN_CUDART_LIBRARY"}) {
    if (auto value = env(name); !value.empty()) in.overrides[name] = std::move(value);
  }
  in.virtual_env = env("VIRTUAL_ENV");
  in.pythonpath = env("PYTHONPATH");
  in.conda_prefix = env("CONDA_PREFIX");
  in.ld_library_path = env("LD_LIBRARY_PATH");
  in.runtime_file = runtime_file();
  in.python_dirs = python_dirs;
  return in;
}

std::string dl_error() {
  const char* e = ::dlerror();
  return e ? e : "unknown error";
}

// The file the dynamic loader loaded for `handle`.
std::string file_of(void* handle, const std::string& fallback) {
  struct link_map* map = nullptr;
  if (::dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name && *map->l_name) return map->l_name;
  return fallback;
}

struct Loaded {
  void* handle = nullptr;
  std::string file;
  std::string origin;
};

// The first place of `spec` that has the library; nullopt with `error` set otherwise.
std::optional<Loaded> load(const LibrarySpec& spec, const NcclSearchInputs& in, std::string& error) {
  using Kind = LibraryCandidate::Kind;
  std::vector<LibraryAttempt> attempts;
  for (const auto& candidate : library_candidates(spec, in)) {
    std::string outcome;
    switch (candidate.kind) {
      case Kind::override_file: {
        const auto& path = candidate.names.front();
        if (exists(path)) {
          if (void* h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL))
            return Loaded{h, file_of(h, path), candidate.origin};
          outcome = dl_error();
        }
        break;
      }
      case Kind::loaded:
        for (const auto& name : candidate.names) {
          if (void* h = ::dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD))
            return Loaded{h, file_of(h, name), candidate.origin};
        }
        break;
      case Kind::files:
        for (const auto& name : candidate.names) {
          const auto path = candidate.dir + "/" + name;
          if (!exists(path)) continue;
          if (void* h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL))
            return Loaded{h, file_of(h, path), candidate.origin};
          outcome += (outcome.empty() ? "" : "; ") + dl_error();
        }
        break;
      case Kind::by_name:
        for (const auto& name : candidate.names) {
          if (void* h = ::dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL))
            return Loaded{h, file_of(h, name), candidate.origin};
          // "cannot open shared object file" is not being there; anything else is worth the words.
          const auto why = dl_error();
          if (why.find("cannot open shared object file") == std::string::npos)
            outcome += (outcome.empty() ? "" : "; ") + why;
        }
        break;
    }
    attempts.push_back({candidate, outcome});
  }
  error = library_not_found_message(spec, attempts, in);
  return std::nullopt;
}

template <typename F>
void resolve(void* handle, const char* name, F& slot, std::vector<std::string>& missing) {
  slot = reinterpret_cast<F>(::dlsym(handle, name));
  if (!slot) missing.emplace_back(name);
}

std::unique_ptr<NcclApi> load_api() {
  const NcclSearchInputs in = search_inputs();
  std::string nccl_error;
  std::string cudart_error;
  const auto nccl = load(nccl_spec(), in, nccl_error);
  const auto cudart = load(cudart_spec(), in, cudart_error);
  if (!nccl || !cudart) {
    throw NcclError(!nccl && !cudart ? nccl_error + "\n" + cudart_error : !nccl ? nccl_error : cudart_error);
  }
  auto api = std::make_unique<NcclApi>();
  std::vector<std::string> missing;
#define RANKRUN_RESOLVE(name) resolve(nccl->handle, #name, api->name, missing);
  RANKRUN_NCCL_FUNCTIONS(RANKRUN_RESOLVE)
#undef RANKRUN_RESOLVE
  if (!missing.empty()) throw NcclError(missing_symbols_message(nccl_spec(), nccl->file, nccl->origin, missing));
#define RANKRUN_RESOLVE(name) resolve(cudart->handle, #name, api->name, missing);
  RANKRUN_CUDART_FUNCTIONS(RANKRUN_RESOLVE)
#undef RANKRUN_RESOLVE
  if (!missing.empty()) throw NcclError(missing_symbols_message(cudart_spec(), cudart->file, cudart->origin, missing));
  // The handles stay open for the life of the process: NCCL's threads outlive any one object.
  api->libraries.nccl = nccl->file;
  api->libraries.nccl_origin = nccl->origin;
  api->libraries.cudart = cudart->file;
  api->libraries.cudart_origin = cudart->origin;
  int version = 0;
  if (api->ncclGetVersion(&version) == ncclSuccess) api->libraries.nccl_version = nccl_version_text(version);
  return api;
}

}  // namespace

const NcclApi& nccl_api() {
  static std::mutex mutex;
  static std::unique_ptr<NcclApi> api;
  std::lock_guard<std::mutex> lock(mutex);
  if (!api) api = load_api();
  return *api;
}

}  // namespace rankrun::worker

namespace rankrun {

const NcclLibraries& nccl_libraries() { return worker::nccl_api().libraries; }

}  // namespace rankrun
