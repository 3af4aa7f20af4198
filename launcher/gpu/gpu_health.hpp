#pragma once
// What a node's GPUs, as NVML reads them, mean for a job: processes that are not the job's
// holding memory there, GPUs that are unfit, and the memory an attempt has not yet released.
// Pure: nvml.hpp reads the GPUs, gpu_guard.hpp the processes' /proc facts.

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace rankrun::launcher::gpu {

/// A process NVML lists on a GPU (a compute context) and the memory it holds.
struct GpuProcess {
  pid_t pid = 0;
  std::optional<std::uint64_t> used_bytes;  // nullopt: NVML cannot say (no permission, a container)
};

/// One GPU of the job's, as NVML read it.
struct GpuState {
  std::string id;  // as the job names it (--gpus, CUDA_VISIBLE_DEVICES): "0", "GPU-8f3c..."
  std::string name;
  std::string uuid;
  /// NVML could not reach the device: its error ("GPU is lost", "GPU requires reset", ...).
  std::optional<std::string> unreachable;
  int unreachable_code = 0;                      // NVML's return code for it
  std::optional<std::uint64_t> ecc_uncorrected;  // volatile: since the driver loaded; nullopt: no ECC
  bool retired_pages_pending = false;
  bool remap_pending = false;
  bool remap_failed = false;
  int compute_mode = 0;  // NVML: 0 default, 2 prohibited, 3 exclusive process
  std::optional<bool> persistence;
  std::uint64_t total_bytes = 0;
  std::uint64_t used_bytes = 0;
  std::vector<GpuProcess> processes;
};

inline constexpr int k_compute_prohibited = 2;
inline constexpr int k_compute_exclusive_process = 3;

/// What /proc says about a pid that NVML lists.
struct ProcessFacts {
  bool alive = false;        // a live process (not a zombie) with that pid
  char state = '?';          // /proc/PID/stat's state
  std::string user;          // its owner's name (or uid)
  std::string command;       // its command line, spaces between the arguments, shortened
  double age_seconds = 0;    // how long it has run
  bool parent_gone = false;  // re-parented to init (or a subreaper other than its own parent)
  bool no_session = false;   // its session's leader is gone
  bool of_job = false;       // a process of this job (its scope: cgroup, descendants, marker)
};

/// A line of the GPU check: a problem with one GPU, and what to do.
struct Finding {
  enum class Kind { HeldByOther, Unfit, Advice };
  Kind kind = Kind::Unfit;
  std::string gpu;     // "GPU 0"
  std::string detail;  // what was found
  std::string fix;     // what to do
};

/// "GPU 0" / "GPU GPU-8f3c..." with its model when known: "GPU 0 (NVIDIA H200)".
std::string gpu_label(const GpuState& gpu);

/// Processes on the job's GPUs that are not the job's, one finding each, named with pid, user,
/// command, memory, age and whether it looks orphaned. `me`: the user rankrun runs as (the fix
/// is `kill PID` for the user's own orphan). `is_worker`: a pid the job started.
std::vector<Finding> held_by_others(const std::vector<GpuState>& gpus, const std::function<ProcessFacts(pid_t)>& facts,
                                    const std::string& me, const std::function<bool(pid_t)>& is_worker = {});

/// GPUs that are unfit for work (lost, needing a reset, uncorrectable ECC errors, pages or rows
/// pending a reset, compute prohibited), each with what to do. `shared`: several workers share a
/// GPU (--no-pin), which an exclusive-process GPU refuses. `advice`: also what only --check
/// mentions (persistence mode off).
std::vector<Finding> unfit(const std::vector<GpuState>& gpus, bool shared, bool advice);

/// A process still holding memory of an attempt that ended.
struct Holder {
  std::string gpu;
  pid_t pid = 0;
  std::optional<std::uint64_t> bytes;
  ProcessFacts facts;
};

/// The memory the last attempt still holds: processes NVML lists that the attempt started
/// (`is_attempt`), that are the job's, or that have exited (memory the driver has not yet
/// released). A live process of someone else's is not the attempt's.
std::vector<Holder> attempt_holders(const std::vector<GpuState>& gpus, const std::function<ProcessFacts(pid_t)>& facts,
                                    const std::function<bool(pid_t)>& is_attempt);

/// "GPU 0: pid 4242 (8.0 GiB), pid 4243" for the waiting line.
std::string describe_holders(const std::vector<Holder>& holders);

/// One line per holder still there when the wait gave up: pid, state, command, memory, why.
std::vector<std::string> describe_stuck(const std::vector<Holder>& holders, double waited_seconds);

/// "3h12m", "4m05s", "12s".
std::string format_age(double seconds);

}  // namespace rankrun::launcher::gpu
