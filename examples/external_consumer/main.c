/* The C API from an installed tree. */
#include <rankrun/worker.h>
#include <stdio.h>

int main(void) {
  char err[256];
  rankrun_worker* worker;
  if (rankrun_worker_create(&worker, -1, err, sizeof err) != RANKRUN_OK) {
    fprintf(stderr, "%s\n", err);
    return 1;
  }
  printf("consumer_c rank %d/%d\n", rankrun_worker_rank(worker), rankrun_worker_world_size(worker));
  rankrun_worker_destroy(worker);
  return 0;
}
