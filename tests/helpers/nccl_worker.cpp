// A trainer on the worker runtime that sets up rankrun::NcclCommunicator and says what it got, for
// the tests of loading NCCL at run time (tests/integration/test_nccl_loader.py), which give it the
// stand-in NCCL and CUDA runtime of fake_nccl.c and fake_cudart.c. It includes no CUDA header:
// the runtime's header needs none.
//
//   nccl_worker             the communicator over the job's ranks: prints
//                           "rank R/W device D comm=0x... nccl=FILE (ORIGIN) version V cudart=FILE (ORIGIN)",
//                           waits on it, lets the destructor finalize and destroy it, then meets
//                           the other ranks at a barrier
//   nccl_worker --abort     the same, aborting the communicator instead
//   nccl_worker --libraries only rankrun::nccl_libraries(), as one line
#include <cstring>
#include <iostream>
#include <stdexcept>
#include <string>

#include "rankrun/failure_record.hpp"
#include "rankrun/nccl_communicator.hpp"
#include "rankrun/worker_session.hpp"

namespace {

std::string describe(const rankrun::NcclLibraries& libs) {
  return "nccl=" + libs.nccl + " (" + libs.nccl_origin + ") version " + libs.nccl_version + " cudart=" + libs.cudart +
         " (" + libs.cudart_origin + ")";
}

int train(int argc, char** argv) {
  bool abort_it = false;
  bool libraries_only = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--abort") == 0)
      abort_it = true;
    else if (std::strcmp(argv[i], "--libraries") == 0)
      libraries_only = true;
    else
      throw std::invalid_argument(std::string("unknown argument ") + argv[i]);
  }
  if (libraries_only) {
    std::cout << describe(rankrun::nccl_libraries()) << std::endl;
    return 0;
  }
  rankrun::WorkerSession session;
  {
    rankrun::NcclCommunicator comm(session.collectives());
    std::cout << "rank " << comm.rank() << "/" << comm.world_size() << " device " << comm.device()
              << " comm=" << static_cast<const void*>(comm.get()) << " " << describe(rankrun::nccl_libraries())
              << std::endl;
    comm.wait("after init");
    if (abort_it) comm.abort();
  }
  session.collectives().barrier("end");
  return 0;
}

}  // namespace

RANKRUN_RECORD(train)
