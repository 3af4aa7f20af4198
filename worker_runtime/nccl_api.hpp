#pragma once
// The NCCL and CUDA runtime functions NcclCommunicator calls, resolved from the libraries the
// runtime loads when first used (nccl_search.hpp says where it looks), never linked. Compiled
// against nccl.h and cuda_runtime.h, so that each entry has the type the headers declare.

#include <nccl.h>

#include "rankrun/nccl_communicator.hpp"

namespace rankrun::worker {

// The one table: every function the communicator calls, by library.
#define RANKRUN_NCCL_FUNCTIONS(X) \
  X(ncclGetVersion)               \
  X(ncclGetUniqueId)              \
  X(ncclCommInitRankConfig)       \
  X(ncclCommGetAsyncError)        \
  X(ncclCommFinalize)             \
  X(ncclCommDestroy)              \
  X(ncclCommAbort)                \
  X(ncclGetErrorString)           \
  X(ncclGetLastError)
#define RANKRUN_CUDART_FUNCTIONS(X) \
  X(cudaSetDevice)                  \
  X(cudaGetDeviceCount)             \
  X(cudaGetErrorString)

struct NcclApi {
#define RANKRUN_NCCL_API_ENTRY(name) decltype(&::name) name = nullptr;
  RANKRUN_NCCL_FUNCTIONS(RANKRUN_NCCL_API_ENTRY)
  RANKRUN_CUDART_FUNCTIONS(RANKRUN_NCCL_API_ENTRY)
#undef RANKRUN_NCCL_API_ENTRY
  NcclLibraries libraries;
};

/// The table, loading both libraries on the first call (thread-safe). Throws NcclError naming
/// every place looked at when a library is found nowhere, or the library and the function
/// when one lacks a function.
const NcclApi& nccl_api();

}  // namespace rankrun::worker
