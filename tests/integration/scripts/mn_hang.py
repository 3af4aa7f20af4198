"""Multi-node hang: every rank joins the gloo group, then rank 0 waits in barrier() while the
others wait in all_reduce(): mismatched collectives, every rank blocked on every node."""
import os

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
print(f"ready rank={rank}", flush=True)
if rank == 0:
    dist.barrier()  # the blocking line: rank 0
else:
    dist.all_reduce(torch.ones(1))  # the blocking line: the others
