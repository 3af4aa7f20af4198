// A worker on rankrun's worker runtime, for the tests of a rankrun that looks late: every rank
// meets at a barrier, says it is ready ($READY_DIR/ready.<rank>, holding its pid), and waits for
// $READY_DIR/go; then rank $FAIL_RANK throws (the runtime records the failure in its error file)
// and the others meet at a second barrier, which times out without it (1.5 s), as victims do.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>

#include "rankrun/failure_record.hpp"
#include "rankrun/worker_session.hpp"

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) throw std::invalid_argument(std::string(name) + " is not set");
  return v;
}

int train(int, char**) {
  const std::string dir = env("READY_DIR");
  const int fail_rank = std::atoi(env("FAIL_RANK").c_str());
  rankrun::SessionOptions options;
  options.collectives.timeout = std::chrono::milliseconds(1500);
  rankrun::WorkerSession session(options);
  const int rank = session.rank();
  session.collectives().barrier("start");
  const std::string ready = dir + "/ready." + std::to_string(rank);
  if (FILE* f = std::fopen((ready + ".tmp").c_str(), "w")) {
    std::fprintf(f, "%d", static_cast<int>(::getpid()));
    std::fclose(f);
    std::rename((ready + ".tmp").c_str(), ready.c_str());
  }
  const std::string go = dir + "/go";
  while (::access(go.c_str(), F_OK) != 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (rank == fail_rank) throw std::runtime_error("rank " + std::to_string(rank) + " fails on purpose");
  session.collectives().barrier("after");
  return 0;
}

}  // namespace

RANKRUN_RECORD(train)
