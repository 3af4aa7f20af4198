#include "launcher/gpu/nvml.hpp"

#include "base/parse_number.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <optional>

namespace rankrun::launcher::gpu {

namespace {

// NVML's ABI, the part rankrun uses (nvml.h is not needed to build).
using Device = void*;
constexpr int k_success = 0;
constexpr int k_insufficient_size = 7;
constexpr int k_memory_error_uncorrected = 1;
constexpr int k_volatile_ecc = 0;
constexpr int k_enabled = 1;
constexpr unsigned k_max_processes = 1024;
constexpr unsigned long long k_value_not_available = ~0ull;

struct ProcessInfo {  // nvmlProcessInfo_t (v2 layout), what the _v3 and _v2 process lists fill
  unsigned int pid;
  unsigned long long used_gpu_memory;
  unsigned int gpu_instance_id;
  unsigned int compute_instance_id;
};

struct Memory {  // nvmlMemory_t
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

struct PciInfo {  // nvmlPciInfo_t (v3)
  char bus_id_legacy[16];
  unsigned domain;
  unsigned bus;
  unsigned device;
  unsigned pci_device_id;
  unsigned pci_subsystem_id;
  char bus_id[32];
};

template <typename F>
F symbol(void* handle, const char* name) {
  return reinterpret_cast<F>(::dlsym(handle, name));
}

}  // namespace

struct Nvml::Api {
  int (*init)() = nullptr;
  int (*shutdown)() = nullptr;
  const char* (*error_string)(int) = nullptr;
  int (*count)(unsigned*) = nullptr;
  int (*by_index)(unsigned, Device*) = nullptr;
  int (*by_uuid)(const char*, Device*) = nullptr;
  int (*name)(Device, char*, unsigned) = nullptr;
  int (*uuid)(Device, char*, unsigned) = nullptr;
  int (*memory)(Device, Memory*) = nullptr;
  int (*processes)(Device, unsigned*, ProcessInfo*) = nullptr;
  int (*ecc)(Device, int, int, unsigned long long*) = nullptr;
  int (*retired_pending)(Device, int*) = nullptr;
  int (*remapped)(Device, unsigned*, unsigned*, unsigned*, unsigned*) = nullptr;
  int (*compute_mode)(Device, int*) = nullptr;
  int (*persistence)(Device, int*) = nullptr;
  int (*pci)(Device, PciInfo*) = nullptr;

  // The device `id` names (an index as CUDA_VISIBLE_DEVICES gives it, or a "GPU-..." UUID):
  // NVML's return code, or nullopt for an id NVML cannot look up (a MIG instance; gpu_list.cpp
  // lets nothing else through).
  std::optional<int> handle(const std::string& id, Device* d) const {
    if (id.rfind("MIG-", 0) == 0) return std::nullopt;
    if (id.rfind("GPU-", 0) == 0) return by_uuid ? by_uuid(id.c_str(), d) : k_insufficient_size;
    if (const auto index = parse_number<unsigned>(id)) return by_index(*index, d);
    return std::nullopt;
  }

  std::string error(int code) const {
    const char* s = error_string ? error_string(code) : nullptr;
    return s ? std::string(s) : "NVML error " + std::to_string(code);
  }
};

std::unique_ptr<Nvml> Nvml::open(const EnvMap& env, std::string* why) {
  const auto it = env.find("RANKRUN_NVML_LIBRARY");
  const std::string path = it != env.end() && !it->second.empty() ? it->second : "libnvidia-ml.so.1";
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    if (why) *why = "cannot load " + path + " (no NVIDIA driver here)";
    return nullptr;
  }
  auto api = std::make_unique<Api>();
  api->init = symbol<int (*)()>(handle, "nvmlInit_v2");
  api->shutdown = symbol<int (*)()>(handle, "nvmlShutdown");
  api->error_string = symbol<const char* (*)(int)>(handle, "nvmlErrorString");
  api->count = symbol<int (*)(unsigned*)>(handle, "nvmlDeviceGetCount_v2");
  api->by_index = symbol<int (*)(unsigned, Device*)>(handle, "nvmlDeviceGetHandleByIndex_v2");
  api->by_uuid = symbol<int (*)(const char*, Device*)>(handle, "nvmlDeviceGetHandleByUUID");
  api->name = symbol<int (*)(Device, char*, unsigned)>(handle, "nvmlDeviceGetName");
  api->uuid = symbol<int (*)(Device, char*, unsigned)>(handle, "nvmlDeviceGetUUID");
  api->memory = symbol<int (*)(Device, Memory*)>(handle, "nvmlDeviceGetMemoryInfo");
  api->processes = symbol<int (*)(Device, unsigned*, ProcessInfo*)>(handle, "nvmlDeviceGetComputeRunningProcesses_v3");
  if (!api->processes) {
    api->processes =
        symbol<int (*)(Device, unsigned*, ProcessInfo*)>(handle, "nvmlDeviceGetComputeRunningProcesses_v2");
  }
  api->ecc = symbol<int (*)(Device, int, int, unsigned long long*)>(handle, "nvmlDeviceGetTotalEccErrors");
  api->retired_pending = symbol<int (*)(Device, int*)>(handle, "nvmlDeviceGetRetiredPagesPendingStatus");
  api->remapped =
      symbol<int (*)(Device, unsigned*, unsigned*, unsigned*, unsigned*)>(handle, "nvmlDeviceGetRemappedRows");
  api->compute_mode = symbol<int (*)(Device, int*)>(handle, "nvmlDeviceGetComputeMode");
  api->persistence = symbol<int (*)(Device, int*)>(handle, "nvmlDeviceGetPersistenceMode");
  api->pci = symbol<int (*)(Device, PciInfo*)>(handle, "nvmlDeviceGetPciInfo_v3");
  if (!api->init || !api->shutdown || !api->count || !api->by_index) {
    if (why) *why = path + " is not NVML (nvmlInit_v2 or nvmlDeviceGetHandleByIndex_v2 missing)";
    ::dlclose(handle);
    return nullptr;
  }
  if (const int rc = api->init(); rc != k_success) {
    if (why) *why = "NVML did not start: " + api->error(rc);
    ::dlclose(handle);
    return nullptr;
  }
  return std::unique_ptr<Nvml>(new Nvml(handle, std::move(api)));
}

Nvml::Nvml(void* handle, std::unique_ptr<Api> api) : m_handle(handle), m_api(std::move(api)) {}

Nvml::~Nvml() {
  m_api->shutdown();
  ::dlclose(m_handle);
}

int Nvml::device_count() const {
  unsigned n = 0;
  return m_api->count(&n) == k_success ? static_cast<int>(n) : 0;
}

std::optional<std::string> Nvml::pci_address(const std::string& id) const {
  const Api& a = *m_api;
  Device d = nullptr;
  PciInfo info{};
  if (!a.pci || a.handle(id, &d) != k_success || a.pci(d, &info) != k_success) return std::nullopt;
  char text[32];
  std::snprintf(text, sizeof text, "%04x:%02x:%02x.0", info.domain & 0xffffu, info.bus & 0xffu, info.device & 0x1fu);
  return std::string(text);
}

std::vector<GpuState> Nvml::read(const std::vector<std::string>& ids) const {
  const Api& a = *m_api;
  std::vector<GpuState> out;
  for (const auto& id : ids) {
    Device d = nullptr;
    const auto found = a.handle(id, &d);
    if (!found) continue;  // a MIG instance: its parent GPU is not named here
    int rc = *found;
    GpuState g;
    g.id = id;
    if (rc != k_success) {
      g.unreachable = a.error(rc);
      g.unreachable_code = rc;
      out.push_back(std::move(g));
      continue;
    }
    std::array<char, 96> text{};
    if (a.name && a.name(d, text.data(), static_cast<unsigned>(text.size())) == k_success) g.name = text.data();
    text.fill('\0');
    if (a.uuid && a.uuid(d, text.data(), static_cast<unsigned>(text.size())) == k_success) g.uuid = text.data();
    Memory m{};
    if (a.memory && a.memory(d, &m) == k_success) {
      g.total_bytes = m.total;
      g.used_bytes = m.used;
    }
    if (a.processes) {
      unsigned count = 64;
      std::vector<ProcessInfo> list;
      for (;;) {
        list.assign(count, ProcessInfo{});
        unsigned n = count;
        rc = a.processes(d, &n, list.data());
        if (rc == k_insufficient_size && n > count && n <= k_max_processes) {
          count = n + 8;  // more came while we asked: a little headroom
          continue;
        }
        if (rc == k_success)
          list.resize(std::min(n, count));
        else
          list.clear();
        break;
      }
      for (const auto& p : list) {
        GpuProcess gp;
        gp.pid = static_cast<pid_t>(p.pid);
        if (p.used_gpu_memory != k_value_not_available) gp.used_bytes = p.used_gpu_memory;
        g.processes.push_back(gp);
      }
    }
    unsigned long long ecc = 0;
    if (a.ecc && a.ecc(d, k_memory_error_uncorrected, k_volatile_ecc, &ecc) == k_success) g.ecc_uncorrected = ecc;
    int state = 0;
    if (a.retired_pending && a.retired_pending(d, &state) == k_success) g.retired_pages_pending = state == k_enabled;
    unsigned corrected = 0, uncorrected = 0, pending = 0, failed = 0;
    if (a.remapped && a.remapped(d, &corrected, &uncorrected, &pending, &failed) == k_success) {
      g.remap_pending = pending != 0;
      g.remap_failed = failed != 0;
    }
    int mode = 0;
    if (a.compute_mode && a.compute_mode(d, &mode) == k_success) g.compute_mode = mode;
    if (a.persistence && a.persistence(d, &state) == k_success) g.persistence = state == k_enabled;
    out.push_back(std::move(g));
  }
  return out;
}

int count_nvidia_gpus(const EnvMap& env) {
  std::error_code ec;
  const std::filesystem::path proc("/proc/driver/nvidia/gpus");
  if (std::filesystem::is_directory(proc, ec)) {
    int n = 0;
    for (const auto& entry : std::filesystem::directory_iterator(proc, ec)) {
      (void)entry;
      ++n;
    }
    if (n > 0) return n;
  }
  const auto nvml = Nvml::open(env);
  return nvml ? nvml->device_count() : 0;
}

}  // namespace rankrun::launcher::gpu
