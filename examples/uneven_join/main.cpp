// Uneven inputs without a hang: rank r has base + r batches. A plain loop would leave the
// rank with the fewest batches waiting forever for a collective the others never call (or
// the reverse). With rankrun::Join every rank learns, at each step, whether everyone (or
// anyone) still has a batch, so all ranks leave the loop at the same step.
//
//   rankrun --nproc-per-node 4 --no-python build/examples/uneven_join/uneven_join [base]
//
// Exits 0 when both loops ran the expected number of steps on this rank.

#include <cstdint>
#include <iostream>
#include <string>

#include <rankrun/failure_record.hpp>
#include <rankrun/join.hpp>
#include <rankrun/worker_session.hpp>

namespace example {

// Stand-in for a training step: a collective every rank must join, like DDP's gradient
// all-reduce. Ranks without data contribute nothing.
std::int64_t fake_step(rankrun::Collectives& collectives, bool has_batch, std::int64_t value) {
  std::int64_t sum = 0;
  for (const std::string& part : collectives.all_gather("gradients", has_batch ? std::to_string(value) : "0"))
    sum += std::stoll(part);
  return sum;
}

int run(int argc, char** argv) {
  const int base = argc > 1 ? std::stoi(argv[1]) : 5;
  rankrun::WorkerSession session;
  const int rank = session.rank();
  const int world = session.world_size();
  const int my_batches = base + rank;

  // Stop as soon as any rank runs out: every rank takes `base` steps.
  rankrun::Join until_first(session.collectives(), "until-first");
  int steps_all = 0;
  while (until_first.all_have_more(steps_all < my_batches)) fake_step(session.collectives(), true, ++steps_all);

  // Use every batch: ranks that ran out take zero-contribution steps until the last is done.
  rankrun::Join until_last(session.collectives(), "until-last");
  int steps_any = 0;
  int used = 0;
  while (until_last.any_has_more(used < my_batches)) {
    const bool has_batch = used < my_batches;
    if (has_batch) ++used;
    fake_step(session.collectives(), has_batch, 1);
    ++steps_any;
  }
  session.collectives().barrier("end");

  const bool ok = steps_all == base && steps_any == base + world - 1 && used == my_batches;
  std::cout << "rank " << rank << "/" << world << ": " << my_batches << " batches, stop-at-first steps=" << steps_all
            << ", use-all steps=" << steps_any << (ok ? " ok" : " WRONG") << std::endl;
  return ok ? 0 : 1;
}

}  // namespace example

RANKRUN_RECORD(example::run)
