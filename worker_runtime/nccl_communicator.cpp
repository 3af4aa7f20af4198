// NcclCommunicator: every NCCL and CUDA call goes through the table of nccl_api.hpp, filled from
// the libraries loaded at run time.
#include "rankrun/nccl_communicator.hpp"

#if RANKRUN_WORKER_HAVE_NCCL

#include <cstring>
#include <thread>
#include <utility>

#include "rankrun/collectives.hpp"
#include "worker_runtime/nccl_api.hpp"

namespace rankrun {
namespace {

using Clock = std::chrono::steady_clock;
using worker::nccl_api;

std::string nccl_message(ncclResult_t result, ncclComm_t comm) {
  const auto& nccl = nccl_api();
  const char* text = nccl.ncclGetErrorString(result);
  std::string out = text ? text : "NCCL error " + std::to_string(static_cast<int>(result));
  const char* detail = nccl.ncclGetLastError(comm);
  if (detail && *detail) out += std::string(" (") + detail + ")";
  return out;
}

}  // namespace

NcclCommunicator::NcclCommunicator(Collectives& collectives, NcclOptions options) : m_timeout(options.timeout) {
  const WorkerContext& context = collectives.context();
  m_rank = context.rank;
  m_world_size = context.world_size;
  const auto deadline = Clock::now() + m_timeout;
  // Loads NCCL and the CUDA runtime on the first communicator (throws NcclError if not found).
  const auto& api = nccl_api();

  // First: every CUDA context NCCL creates belongs to the current device.
  m_device = select_cuda_device(context);
  if (cudaError_t err = api.cudaSetDevice(m_device); err != cudaSuccess) {
    int count = 0;
    const std::string seen = api.cudaGetDeviceCount(&count) == cudaSuccess
                                 ? ", CUDA sees " + std::to_string(count) + " device" + (count == 1 ? "" : "s")
                                 : "";
    throw NcclError("cudaSetDevice(" + std::to_string(m_device) + ") failed on rank " + std::to_string(m_rank) + ": " +
                    api.cudaGetErrorString(err) +
                    " (CUDA_VISIBLE_DEVICES=" + context.cuda_visible_devices.value_or("<unset>") +
                    ", LOCAL_RANK=" + std::to_string(context.local_rank) + seen + "; CUDA runtime " +
                    api.libraries.cudart + ", " + api.libraries.cudart_origin + ")");
  }

  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  if (m_rank == 0) {
    if (ncclResult_t result = api.ncclGetUniqueId(&id); result != ncclSuccess)
      throw NcclError("ncclGetUniqueId failed on rank 0: " + nccl_message(result, nullptr));
  }
  const std::string shared = collectives.broadcast(
      options.name, std::string_view(reinterpret_cast<const char*>(&id), sizeof id), 0, m_timeout);
  if (shared.size() != sizeof id)
    throw NcclError("NCCL unique id from rank 0 has " + std::to_string(shared.size()) + " bytes, expected " +
                    std::to_string(sizeof id));
  std::memcpy(&id, shared.data(), sizeof id);

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  // Non-blocking, so that a peer that never shows up costs a timeout, not a hang.
  config.blocking = 0;
  ncclResult_t result = api.ncclCommInitRankConfig(&m_comm, m_world_size, id, m_rank, &config);
  if (result != ncclSuccess && result != ncclInProgress) {
    const std::string message = nccl_message(result, m_comm);
    abort();
    throw NcclError("ncclCommInitRankConfig failed on rank " + std::to_string(m_rank) + " (device " +
                    std::to_string(m_device) + "): " + message);
  }
  ncclResult_t state = ncclInProgress;
  while (m_comm) {
    if (ncclResult_t r = api.ncclCommGetAsyncError(m_comm, &state); r != ncclSuccess) state = r;
    if (state != ncclInProgress) break;
    if (Clock::now() >= deadline) {
      abort();
      throw NcclError("NCCL communicator initialisation on rank " + std::to_string(m_rank) + " (device " +
                      std::to_string(m_device) + ") did not complete within " +
                      std::to_string(std::chrono::duration_cast<std::chrono::seconds>(m_timeout).count()) +
                      "s; aborted");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (state != ncclSuccess) {
    const std::string message = nccl_message(state, m_comm);
    abort();
    throw NcclError("NCCL communicator initialisation failed on rank " + std::to_string(m_rank) + " (device " +
                    std::to_string(m_device) + "): " + message);
  }
}

NcclCommunicator::~NcclCommunicator() {
  if (!m_comm) return;
  const auto& api = nccl_api();
  ncclResult_t result = api.ncclCommFinalize(m_comm);
  const auto deadline = Clock::now() + m_timeout;
  ncclResult_t state = result;
  while (state == ncclInProgress && Clock::now() < deadline) {
    if (api.ncclCommGetAsyncError(m_comm, &state) != ncclSuccess) break;
    if (state == ncclInProgress) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (state != ncclSuccess) {
    abort();
    return;
  }
  api.ncclCommDestroy(m_comm);
  m_comm = nullptr;
}

NcclCommunicator::NcclCommunicator(NcclCommunicator&& other) noexcept
    : m_comm(std::exchange(other.m_comm, nullptr)),
      m_device(other.m_device),
      m_rank(other.m_rank),
      m_world_size(other.m_world_size),
      m_timeout(other.m_timeout) {}

NcclCommunicator& NcclCommunicator::operator=(NcclCommunicator&& other) noexcept {
  if (this != &other) {
    abort();
    m_comm = std::exchange(other.m_comm, nullptr);
    m_device = other.m_device;
    m_rank = other.m_rank;
    m_world_size = other.m_world_size;
    m_timeout = other.m_timeout;
  }
  return *this;
}

void NcclCommunicator::check(int code, std::string_view what) {
  const auto result = static_cast<ncclResult_t>(code);
  if (result == ncclSuccess) return;
  if (result == ncclInProgress) return wait(what);
  const std::string message = nccl_message(result, m_comm);
  abort();
  throw NcclError(std::string(what) + " failed on rank " + std::to_string(m_rank) + ": " + message);
}

void NcclCommunicator::wait(std::string_view what) {
  const auto deadline = Clock::now() + m_timeout;
  for (;;) {
    if (!m_comm) throw NcclError(std::string(what) + ": the communicator was aborted");
    ncclResult_t state = ncclInProgress;
    if (ncclResult_t r = nccl_api().ncclCommGetAsyncError(m_comm, &state); r != ncclSuccess) state = r;
    if (state == ncclSuccess) return;
    if (state != ncclInProgress) {
      const std::string message = nccl_message(state, m_comm);
      abort();
      throw NcclError(std::string(what) + " failed on rank " + std::to_string(m_rank) + ": " + message);
    }
    if (Clock::now() >= deadline) {
      abort();
      throw NcclError(std::string(what) + " on rank " + std::to_string(m_rank) + " still in progress after " +
                      std::to_string(std::chrono::duration_cast<std::chrono::seconds>(m_timeout).count()) +
                      "s; communicator aborted");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void NcclCommunicator::abort() noexcept {
  if (m_comm) nccl_api().ncclCommAbort(m_comm);
  m_comm = nullptr;
}

}  // namespace rankrun

#endif  // RANKRUN_WORKER_HAVE_NCCL
