#pragma once
// NCCL bootstrap the way it cannot go wrong: the CUDA device is set before anything touches
// NCCL (a communicator created first lands every rank's context on GPU 0 and hangs the first
// collective), the ncclUniqueId travels through the job's store, and initialisation has a
// deadline after which the communicator is aborted instead of hanging.
// Only when the runtime was built with NCCL (RANKRUN_WORKER_HAVE_NCCL == 1).
// Public header: C++17.

#include "rankrun/config.hpp"

#if RANKRUN_WORKER_HAVE_NCCL

#include <nccl.h>

#include <chrono>
#include <string>
#include <string_view>

#include "rankrun/worker_error.hpp"

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

/// A non-blocking NCCL communicator over all ranks of the job (config.blocking = 0). NCCL
/// calls on it may return ncclInProgress; pass their result to check(), which waits.
class NcclCommunicator {
 public:
  /// Collective over `collectives`' ranks: sets the CUDA device (select_cuda_device: 0 under
  /// rankrun's pinning, else LOCAL_RANK), has rank 0 create the unique id and broadcast it,
  /// and initialises with a deadline. On failure or timeout the communicator is aborted and
  /// NcclError thrown.
  explicit NcclCommunicator(Collectives& collectives, NcclOptions options = {});
  /// Finalizes (waiting up to the timeout) and destroys; aborts if finalizing fails.
  ~NcclCommunicator();
  NcclCommunicator(NcclCommunicator&& other) noexcept;
  NcclCommunicator& operator=(NcclCommunicator&& other) noexcept;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  ncclComm_t get() const { return m_comm; }
  int device() const { return m_device; }
  int rank() const { return m_rank; }
  int world_size() const { return m_world_size; }

  /// Accepts `result` of an NCCL call on this communicator: returns on ncclSuccess, waits
  /// (up to the timeout) on ncclInProgress, and otherwise aborts the communicator and throws
  /// NcclError naming `what`.
  void check(ncclResult_t result, std::string_view what);
  /// Waits until no operation is in progress on the communicator (see check()).
  void wait(std::string_view what);
  /// Aborts the communicator (pending operations are cancelled); safe to call twice.
  void abort() noexcept;

 private:
  ncclComm_t m_comm = nullptr;
  int m_device = 0;
  int m_rank = 0;
  int m_world_size = 1;
  std::chrono::milliseconds m_timeout;
};

}  // namespace rankrun

#endif  // RANKRUN_WORKER_HAVE_NCCL
