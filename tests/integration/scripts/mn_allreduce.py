"""Multi-node check: init_process_group("gloo") from the environment (env://), all_reduce of the
rank, print the launcher's variables and the sum."""
import os
import sys

import torch
import torch.distributed as dist

KEYS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE", "LOCAL_WORLD_SIZE", "ROLE_RANK",
        "MASTER_ADDR", "MASTER_PORT")


def main():
    for k in KEYS:
        print(f"{k}={os.environ.get(k, '<unset>')}", flush=True)
    dist.init_process_group("gloo")
    t = torch.tensor([float(dist.get_rank())])
    dist.all_reduce(t)
    print(f"sum={t.item():.0f}", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    print("done", flush=True)


if __name__ == "__main__":
    main()
    sys.exit(0)
