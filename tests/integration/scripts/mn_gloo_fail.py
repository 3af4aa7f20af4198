"""gloo all_reduce in a loop; rank FAIL_RANK exits 3 after a few rounds. Its peers notice (their
all_reduce fails with a connection error) at about the time its node does."""
import os
import sys
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
for i in range(200):
    t = torch.ones(1)
    dist.all_reduce(t)
    if rank == int(os.environ["FAIL_RANK"]) and i == 3:
        print(f"rank {rank} fails on purpose", file=sys.stderr, flush=True)
        os._exit(3)
    time.sleep(0.05)
