"""The hangs of the field reports, built from what really blocks under gloo.
  uneven    rank 0 finishes and exits 0; rank 1 waits for a key nobody sets
  mismatch  rank 0 waits in barrier(), rank 1 in all_reduce()
  late      rank 1 sleeps before init_process_group while rank 0 waits there
"""
import os
import sys
import time

import torch
import torch.distributed as dist

case = sys.argv[1]
rank = int(os.environ["RANK"])


def wait_for_the_next_epoch():
    dist.distributed_c10d._get_default_store().get("epoch-2-start")  # the blocking line: uneven


if case == "late" and rank == 1:
    time.sleep(120)  # the blocking line: late
dist.init_process_group("gloo")
print(f"rank {rank} joined", flush=True)
if case == "uneven":
    if rank == 0:
        sys.exit(0)
    wait_for_the_next_epoch()
elif case == "mismatch":
    if rank == 0:
        dist.barrier()  # the blocking line: mismatch rank 0
    else:
        dist.all_reduce(torch.ones(1))  # the blocking line: mismatch rank 1
