"""A rank whose DataLoader (num_workers=2, file_system sharing) passes tensors through
/dev/shm, so torch_shm_manager runs. Prints its job id and the pids that may create segments.
FAIL_RANK=r: that rank raises while batches are still in flight; the others wait to be stopped.
READY_DIR=d: each rank marks d/<rank> once its loader runs, and the failing rank raises only when
every rank has (else a slow rank could be stopped before its loader started).
LOADER_CONTEXT=forkserver|spawn|fork: the loader workers' start method (default: Python's)."""
import os
import sys
import time

import torch
import torch.multiprocessing as mp
from torch.utils.data import DataLoader, Dataset

mp.set_sharing_strategy("file_system")
rank = int(os.environ["RANK"])


class Tensors(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        return torch.full((4096,), float(i))


def announce(worker_id):
    # One write: the two loader workers share the rank's stdout.
    os.write(1, f"loader pid={os.getpid()}\n".encode())


def shm_managers():
    found = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/comm") as f:
                if f.read().strip() != "torch_shm_manag":
                    continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                if f"RANKRUN_JOB={os.environ['RANKRUN_JOB']}".encode() in f.read():
                    found += 1
        except OSError:
            pass
    return found


def main():
    print(f"job={os.environ['RANKRUN_JOB']} pid={os.getpid()}", flush=True)
    loader = DataLoader(Tensors(), batch_size=4, num_workers=2, worker_init_fn=announce, prefetch_factor=4,
                        multiprocessing_context=os.environ.get("LOADER_CONTEXT") or None)
    it = iter(loader)
    held = [next(it) for _ in range(3)]
    print(f"managers={shm_managers()}", flush=True)
    ready = os.environ.get("READY_DIR")
    if ready:
        open(os.path.join(ready, str(rank)), "w").close()
    if os.environ.get("FAIL_RANK") == str(rank):
        deadline = time.monotonic() + 120
        while ready and len(os.listdir(ready)) < int(os.environ["WORLD_SIZE"]) and time.monotonic() < deadline:
            time.sleep(0.05)
        raise RuntimeError(f"rank {rank} fails with batches in flight")
    if "FAIL_RANK" in os.environ:
        time.sleep(60)
    total = sum(float(b.sum()) for b in held) + sum(float(b.sum()) for b in it)
    print(f"total={total}", flush=True)


# Python 3.14 starts the loader workers from a forkserver, which imports this file again.
if __name__ == "__main__":
    main()
