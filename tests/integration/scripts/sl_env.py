"""Slurm test worker: record where it runs and what rankrun told it, then a gloo all_reduce of the
ranks. Writes $SL_OUT/rank-<RANK>.json and prints `started <time.time()>`."""
import json
import os
import socket
import sys
import time

T_START = time.time()
KEYS = ("RANK", "LOCAL_RANK", "GROUP_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_WORLD_SIZE", "ROLE_RANK",
        "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID", "SLURMD_NODENAME", "SLURM_NODEID", "SLURM_JOB_ID",
        "SLURM_STEP_ID", "SLURM_CONF")


def my_addr(peer):
    """The address this host uses towards `peer` (a UDP connect sends nothing)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.connect((peer, 9))
        return s.getsockname()[0]
    finally:
        s.close()


def main():
    print(f"started {T_START:.6f}", flush=True)
    rec = {k: os.environ.get(k) for k in KEYS}
    rec.update(t_start=T_START, pid=os.getpid(), netns=os.stat("/proc/self/ns/net").st_ino,
               addr=my_addr(os.environ["MASTER_ADDR"]))
    import torch
    import torch.distributed as dist

    rec["t_imported"] = time.time()
    dist.init_process_group("gloo")
    t = torch.tensor([float(dist.get_rank())])
    dist.all_reduce(t)
    rec["sum"] = t.item()
    rec["t_reduced"] = time.time()
    dist.barrier()
    dist.destroy_process_group()
    path = os.path.join(os.environ["SL_OUT"], f"rank-{rec['RANK']}.json")
    with open(path + ".tmp", "w") as f:
        json.dump(rec, f)
    os.rename(path + ".tmp", path)
    print(f"sum={rec['sum']:.0f}", flush=True)


if __name__ == "__main__":
    main()
    sys.exit(0)
