// Sums a vector over all ranks through the job's store and checks the result.
//
//   rankrun --nproc-per-node 4 --no-python build/examples/cpp_store_allreduce/cpp_store_allreduce
//
// Rank r contributes v[i] = r + 1 + i; every rank must end with sum_r(r + 1 + i) =
// W(W+1)/2 + W*i. Exits 0 when the result is right, 1 otherwise.
// Failure demos: --throw-on-rank R makes rank R throw (its message and backtrace land in
// rankrun's report); --hang-rank R keeps rank R away from the barrier, and the other ranks
// fail after --timeout-ms naming it; --mismatch-rank R makes rank R call a different
// barrier, and every rank fails naming the divergence. --print-progress: rank 0 prints the
// heartbeat and collective-record keys of every rank as the launcher would read them.

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <rankrun/failure_record.hpp>
#include <rankrun/rendezvous/store_client.hpp>
#include <rankrun/store_keys.hpp>
#include <rankrun/worker_session.hpp>

// Named namespace, not an anonymous one: functions with external linkage keep their names
// in the failure record's backtrace.
namespace example {

struct Args {
  std::size_t size = 1024;
  int throw_on_rank = -1;
  int hang_rank = -1;
  int mismatch_rank = -1;
  bool print_progress = false;
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};
};

Args parse_args(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--print-progress") {
      args.print_progress = true;
      continue;
    }
    if (i + 1 >= argc) throw std::invalid_argument("missing value after " + flag);
    const char* value = argv[++i];
    if (flag == "--size")
      args.size = std::stoul(value);
    else if (flag == "--throw-on-rank")
      args.throw_on_rank = std::stoi(value);
    else if (flag == "--hang-rank")
      args.hang_rank = std::stoi(value);
    else if (flag == "--mismatch-rank")
      args.mismatch_rank = std::stoi(value);
    else if (flag == "--timeout-ms")
      args.timeout = std::chrono::milliseconds(std::stol(value));
    else
      throw std::invalid_argument(
          "unknown flag " + flag +
          " (--size, --throw-on-rank, --hang-rank, --mismatch-rank, --timeout-ms, --print-progress)");
  }
  return args;
}

std::string to_bytes(const std::vector<std::int64_t>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(std::int64_t));
}

std::vector<std::int64_t> sum_over_ranks(rankrun::Collectives& collectives, const std::vector<std::int64_t>& mine) {
  std::vector<std::int64_t> total(mine.size(), 0);
  for (const std::string& bytes : collectives.all_gather("allreduce", to_bytes(mine))) {
    if (bytes.size() != total.size() * sizeof(std::int64_t))
      throw std::runtime_error("a rank sent " + std::to_string(bytes.size()) + " bytes, expected " +
                               std::to_string(total.size() * sizeof(std::int64_t)) + " (same --size everywhere?)");
    std::vector<std::int64_t> theirs(total.size());
    std::memcpy(theirs.data(), bytes.data(), bytes.size());
    for (std::size_t i = 0; i < total.size(); ++i) total[i] += theirs[i];
  }
  return total;
}

// A named frame, so that the failure record's backtrace has something to show.
[[noreturn]] __attribute__((noinline)) void fail_on_purpose(int rank) {
  throw std::runtime_error("rank " + std::to_string(rank) + " failed on purpose (--throw-on-rank)");
}

// What the launcher's hang detector sees: every rank's heartbeat and last collective.
void print_progress(rankrun::WorkerSession& session) {
  rankrun::rendezvous::StoreClient* store = session.collectives().store();
  if (!store) return;
  for (int r = 0; r < session.world_size(); ++r) {
    std::cout << rankrun::heartbeat_key(r) << " = " << store->get(rankrun::heartbeat_key(r)) << "\n";
    std::cout << rankrun::collective_record_key(r) << " = " << store->get(rankrun::collective_record_key(r)) << "\n";
  }
}

int train(int argc, char** argv) {
  const Args args = parse_args(argc, argv);
  rankrun::SessionOptions options;
  options.collectives.timeout = args.timeout;
  rankrun::WorkerSession session(options);
  const int rank = session.rank();
  const int world = session.world_size();

  if (rank == args.throw_on_rank) fail_on_purpose(rank);
  if (rank == args.hang_rank) {
    std::cout << "rank " << rank << ": staying away from the barrier (--hang-rank)" << std::endl;
    std::this_thread::sleep_for(args.timeout * 10);
    return 3;
  }
  session.collectives().barrier(rank == args.mismatch_rank ? "not-start" : "start");

  std::vector<std::int64_t> mine(args.size);
  for (std::size_t i = 0; i < mine.size(); ++i) mine[i] = rank + 1 + static_cast<std::int64_t>(i);
  const std::vector<std::int64_t> total = sum_over_ranks(session.collectives(), mine);
  session.step(1);

  std::size_t wrong = 0;
  for (std::size_t i = 0; i < total.size(); ++i) {
    const std::int64_t expected =
        std::int64_t{world} * (world + 1) / 2 + std::int64_t{world} * static_cast<std::int64_t>(i);
    if (total[i] != expected) {
      if (wrong++ < 5)
        std::cerr << "rank " << rank << ": total[" << i << "] = " << total[i] << ", expected " << expected << "\n";
    }
  }
  // The root's view of the result, to show broadcast: every rank must agree with it.
  const std::string root_total = session.collectives().broadcast("result", to_bytes(total), 0);
  if (root_total != to_bytes(total)) ++wrong;
  session.collectives().barrier("end");
  if (args.print_progress && rank == 0) print_progress(session);

  std::cout << "rank " << rank << "/" << world << ": sum of " << total.size() << " elements";
  if (!total.empty()) std::cout << " [" << total.front() << " ... " << total.back() << "]";
  std::cout << (wrong ? " WRONG" : " ok") << std::endl;
  return wrong ? 1 : 0;
}

}  // namespace example

RANKRUN_RECORD(example::train)
