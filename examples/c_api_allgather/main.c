/* The worker runtime from C: every rank gathers all ranks' numbers, rank 0 broadcasts a
 * token, and each checks what it got. Exits 0 when everything matches. */
#include <rankrun/worker.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int main(void) {
  char err[512];
  rankrun_worker* worker = NULL;
  int status = rankrun_worker_create(&worker, 0, err, sizeof err);
  if (status != RANKRUN_OK) {
    fprintf(stderr, "rankrun_worker_create: %s\n", err);
    return 2;
  }
  const int rank = rankrun_worker_rank(worker);
  const int world = rankrun_worker_world_size(worker);
  int failures = 0;

  int64_t mine = 100 + rank;
  int64_t* all = calloc((size_t)world, sizeof *all);
  status = rankrun_worker_all_gather(worker, "numbers", &mine, sizeof mine, all, 30000);
  if (status != RANKRUN_OK) {
    fprintf(stderr, "all_gather: %s\n", rankrun_worker_last_error(worker));
    return 1;
  }
  for (int r = 0; r < world; ++r)
    if (all[r] != 100 + r) ++failures;

  uint64_t token = rank == 0 ? 0x5eedULL : 0;
  status = rankrun_worker_broadcast(worker, "token", &token, sizeof token, 0, 30000);
  if (status != RANKRUN_OK || token != 0x5eedULL) ++failures;

  status = rankrun_worker_barrier(worker, "end", 30000);
  if (status != RANKRUN_OK) ++failures;

  printf("rank %d/%d: %s\n", rank, world, failures ? "WRONG" : "ok");
  free(all);
  rankrun_worker_destroy(worker);
  return failures ? 1 : 0;
}
