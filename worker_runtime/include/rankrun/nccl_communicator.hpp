#pragma once
// NCCL bootstrap the way it cannot go wrong: the CUDA device is set before anything touches
// NCCL (a communicator created first lands every rank's context on GPU 0 and hangs the first
// collective), the ncclUniqueId travels through the job's store, and initialisation has a
// deadline after which the communicator is aborted instead of hanging.
//
// NCCL (libnccl.so.2) and the CUDA runtime (libcudart.so.13, .12, .11.0) are loaded when first
// used, never linked: one already loaded in the process (the trainer's, torch's), else torch's
// pip wheels in the venv, else LD_LIBRARY_PATH and the system's; RANKRUN_NCCL_LIBRARY and
// RANKRUN_CUDART_LIBRARY name them outright (docs/worker-runtime.md). This header needs neither
// nccl.h nor cuda_runtime.h: a trainer that calls NCCL itself includes nccl.h and links the
// libnccl.so.2 it means to use (the runtime then finds that one already loaded).
// Declared when the runtime was built with NcclCommunicator (RANKRUN_WORKER_HAVE_NCCL == 1).
// Public header: C++17.

#include "rankrun/config.hpp"

#if RANKRUN_WORKER_HAVE_NCCL

#include <chrono>
#include <string>
#include <string_view>

#include "rankrun/worker_error.hpp"

// nccl.h's communicator: ncclComm_t is `struct ncclComm*`.
struct ncclComm;

namespace rankrun {

class Collectives;

/// A CUDA or NCCL call failed or ran past its deadline; the message names the call, the
/// device and NCCL's own explanation.
struct NcclError : WorkerError {
  using WorkerError::WorkerError;
};

struct NcclOptions {
  /// Deadline for ncclCommInitRankConfig (including the unique-id exchange) and for
  /// finalize in the destructor.
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
  /// Name of the unique-id broadcast; distinct names for several communicators.
  std::string name = "nccl-unique-id";
};

/// The libraries NcclCommunicator uses: the files the dynamic loader loaded, why each was
/// chosen ("already loaded in this process", "VIRTUAL_ENV", "RANKRUN_NCCL_LIBRARY", ...), and
/// NCCL's own version ("2.28.9").
struct NcclLibraries {
  std::string nccl;
  std::string nccl_origin;
  std::string nccl_version;
  std::string cudart;
  std::string cudart_origin;
};

/// Loads NCCL and the CUDA runtime unless loaded already (NcclCommunicator's constructor does
/// it too) and says which ones. Throws NcclError naming every place it looked at and the fix
/// when one is found nowhere, or the library and the function when one lacks a function.
const NcclLibraries& nccl_libraries();

/// A non-blocking NCCL communicator over all ranks of the job (config.blocking = 0). NCCL
/// calls on it may return ncclInProgress; pass their result to check(), which waits.
class NcclCommunicator {
 public:
  /// Collective over `collectives`' ranks: sets the CUDA device (select_cuda_device: 0 under
  /// rankrun's pinning, else LOCAL_RANK), has rank 0 create the unique id and broadcast it,
  /// and initialises with a deadline. On failure or timeout the communicator is aborted and
  /// NcclError thrown; also when NCCL or the CUDA runtime cannot be loaded (see nccl_libraries()).
  explicit NcclCommunicator(Collectives& collectives, NcclOptions options = {});
  /// Finalizes (waiting up to the timeout) and destroys; aborts if finalizing fails.
  ~NcclCommunicator();
  NcclCommunicator(NcclCommunicator&& other) noexcept;
  NcclCommunicator& operator=(NcclCommunicator&& other) noexcept;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  /// The ncclComm_t, for the trainer's own NCCL calls.
  ncclComm* get() const { return m_comm; }
  int device() const { return m_device; }
  int rank() const { return m_rank; }
  int world_size() const { return m_world_size; }

  /// Accepts `result` (an ncclResult_t) of an NCCL call on this communicator: returns on
  /// ncclSuccess, waits (up to the timeout) on ncclInProgress, and otherwise aborts the
  /// communicator and throws NcclError naming `what`.
  void check(int result, std::string_view what);
  /// Waits until no operation is in progress on the communicator (see check()).
  void wait(std::string_view what);
  /// Aborts the communicator (pending operations are cancelled); safe to call twice.
  void abort() noexcept;

 private:
  ncclComm* m_comm = nullptr;
  int m_device = 0;
  int m_rank = 0;
  int m_world_size = 1;
  std::chrono::milliseconds m_timeout;
};

}  // namespace rankrun

#endif  // RANKRUN_WORKER_HAVE_NCCL
