// Minimal trainer built against an installed rankrun worker runtime (C++17).
#include <iostream>

#include <rankrun/bucket_sampler.hpp>
#include <rankrun/config.hpp>
#include <rankrun/distributed_sampler.hpp>
#include <rankrun/failure_record.hpp>
#include <rankrun/join.hpp>
#include <rankrun/worker_session.hpp>
#if RANKRUN_WORKER_HAVE_NCCL
#include <rankrun/nccl_communicator.hpp>
#endif

int train(int, char**) {
  rankrun::WorkerSession session;
  rankrun::DistributedSampler sampler(10, session.context());
  session.collectives().barrier("hello");
  std::cout << "consumer rank " << session.rank() << "/" << session.world_size() << " reads " << sampler.size()
            << " samples (runtime " << RANKRUN_WORKER_VERSION << ", nccl " << RANKRUN_WORKER_HAVE_NCCL << ")"
            << std::endl;
  return 0;
}

RANKRUN_RECORD(train)
