/* A stand-in CUDA runtime (libcudart.so.13) for the tests of the worker runtime's NCCL loading
 * (tests/integration/test_nccl_loader.py): the functions NcclCommunicator calls, compiled against
 * cuda_runtime.h, each recording its call and arguments (fake_cuda_log.h) and answering as a
 * machine with GPUs would. Its devices: $RANKRUN_FAKE_CUDA_DEVICES, else as many as
 * CUDA_VISIBLE_DEVICES lists, else 8. */
#include <cuda_runtime.h>
#include <string.h>

#include "fake_cuda_log.h"

static int device_count(void) {
  const char* forced = getenv("RANKRUN_FAKE_CUDA_DEVICES");
  if (forced && *forced) return atoi(forced);
  const char* visible = getenv("CUDA_VISIBLE_DEVICES");
  if (!visible) return 8;
  if (!*visible) return 0;
  int count = 1;
  for (const char* c = visible; *c; ++c) count += *c == ',';
  return count;
}

cudaError_t cudaSetDevice(int device) {
  const char* visible = getenv("CUDA_VISIBLE_DEVICES");
  fake_log("cudaSetDevice device=%d CUDA_VISIBLE_DEVICES=%s", device, visible ? visible : "<unset>");
  return device >= 0 && device < device_count() ? cudaSuccess : cudaErrorInvalidDevice;
}

cudaError_t cudaGetDeviceCount(int* count) {
  *count = device_count();
  fake_log("cudaGetDeviceCount count=%d", *count);
  return cudaSuccess;
}

const char* cudaGetErrorString(cudaError_t error) {
  fake_log("cudaGetErrorString error=%d", (int)error);
  switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    default: return "unknown error";
  }
}
