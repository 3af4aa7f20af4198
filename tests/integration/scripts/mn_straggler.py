"""Multi-node straggler: every rank all_reduces once; then the last rank works SECONDS (default
15) outside any collective (Python busy computing, its stack changing) while every other rank of
every node waits in the next all_reduce; then every rank finishes with "done"."""
import os
import time

import torch
import torch.distributed as dist

SECONDS = float(os.environ.get("SECONDS_BUSY", "15"))
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
dist.all_reduce(torch.ones(1))
print(f"ready rank={rank}", flush=True)


def work_a_little(n):
    return sum(i * i for i in range(n))


if rank == world - 1:
    deadline = time.monotonic() + SECONDS
    while time.monotonic() < deadline:
        work_a_little(20000)  # the working line: the last rank
dist.all_reduce(torch.ones(1))  # the blocking line: the others
print("done", flush=True)
dist.destroy_process_group()
