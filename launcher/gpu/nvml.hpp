#pragma once
// NVML, loaded at run time (never linked): the GPUs' state and the processes that hold their
// memory. $RANKRUN_NVML_LIBRARY names the library to load instead of libnvidia-ml.so.1 (a driver
// installed elsewhere; the test suite's scripted NVML).

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "launcher/types/env_map.hpp"
#include "launcher/gpu/gpu_health.hpp"

namespace rankrun::launcher::gpu {

class Nvml {
 public:
  /// NVML loaded and initialised, or null (no driver, no library) with `why` set.
  static std::unique_ptr<Nvml> open(const EnvMap& env, std::string* why = nullptr);
  ~Nvml();
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  /// The number of GPUs NVML sees (0 when it cannot say).
  int device_count() const;
  /// Each of `ids` (an index as CUDA_VISIBLE_DEVICES gives it, or a "GPU-..." UUID; MIG ids are
  /// left out), as NVML reads it now. An index is NVML's (PCI bus order), which CUDA also uses
  /// under CUDA_DEVICE_ORDER=PCI_BUS_ID and, on a node of one model, by default.
  std::vector<GpuState> read(const std::vector<std::string>& ids) const;
  /// The PCI address of GPU `id` (an index or a "GPU-..." UUID) as sysfs names its device,
  /// "0000:3b:00.0"; nullopt when NVML cannot say (a MIG id, an unknown GPU, an old driver).
  std::optional<std::string> pci_address(const std::string& id) const;

  struct Api;

 private:
  explicit Nvml(void* handle, std::unique_ptr<Api> api);
  void* m_handle;
  std::unique_ptr<Api> m_api;
};

/// Number of NVIDIA GPUs, from /proc/driver/nvidia/gpus, else NVML loaded at run time
/// (never linked; $RANKRUN_NVML_LIBRARY names another library), else 0.
int count_nvidia_gpus(const EnvMap& env);

}  // namespace rankrun::launcher::gpu
