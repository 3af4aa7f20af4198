// All-reduce over NCCL on one GPU per rank, bootstrapped by the worker runtime, with the
// result checked on the host.
//
//   rankrun --nproc-per-node gpu --no-python build/examples/nccl_allreduce/nccl_allreduce
//
// Rank r fills its buffer with r + 1; after the sum every element must be W(W+1)/2.
// Exits 0 when it is, 1 otherwise (or with the CUDA/NCCL error in the failure record).

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstddef>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

#include <rankrun/failure_record.hpp>
#include <rankrun/nccl_communicator.hpp>
#include <rankrun/worker_session.hpp>

namespace {

void cuda_check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(err));
}

int train(int argc, char** argv) {
  const std::size_t count = argc > 1 ? std::stoul(argv[1]) : (std::size_t{1} << 20);
  rankrun::WorkerSession session;
  // Sets the device first, then NCCL; initialisation has a deadline.
  rankrun::NcclCommunicator comm(session.collectives());
  const int rank = session.rank();
  const int world = session.world_size();

  float* device = nullptr;
  cuda_check(cudaMalloc(&device, count * sizeof(float)), "cudaMalloc");
  std::vector<float> host(count, static_cast<float>(rank + 1));
  cuda_check(cudaMemcpy(device, host.data(), count * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy to device");
  cudaStream_t stream;
  cuda_check(cudaStreamCreate(&stream), "cudaStreamCreate");

  comm.check(ncclAllReduce(device, device, count, ncclFloat, ncclSum, comm.get(), stream), "ncclAllReduce");
  cuda_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  cuda_check(cudaMemcpy(host.data(), device, count * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy to host");

  const float expected = static_cast<float>(world) * static_cast<float>(world + 1) / 2.0f;
  std::size_t wrong = 0;
  for (float value : host) wrong += value != expected;
  std::cout << "rank " << rank << "/" << world << " on device " << comm.device() << ": " << count
            << " floats, expected " << expected << ", " << wrong << " wrong" << std::endl;

  cuda_check(cudaStreamDestroy(stream), "cudaStreamDestroy");
  cuda_check(cudaFree(device), "cudaFree");
  session.collectives().barrier("end");
  return wrong ? 1 : 0;
}

}  // namespace

RANKRUN_RECORD(train)
