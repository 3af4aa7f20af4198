"""A plain PyTorch job: init_process_group(gloo) from the environment, all_reduce, barrier.
FAIL_RANK=<r> makes rank r raise after init (with @record when RECORD=1)."""
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    expected = world * (world + 1) / 2
    if int(os.environ.get("FAIL_RANK", "-1")) == rank:
        raise ValueError(f"rank {rank} fails on purpose")
    assert t.item() == expected, (t.item(), expected)
    dist.barrier()
    print(f"rank {rank}/{world} all_reduce={t.item():.0f} ok", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    if os.environ.get("RECORD") == "1":
        record(main)()
    else:
        main()
    sys.exit(0)
