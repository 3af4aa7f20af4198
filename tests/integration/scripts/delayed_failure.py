"""Ranks in an all_reduce loop (gloo); FAIL_RANK raises once READY_DIR/go exists, and the others
die of the broken collective, as victims do. Each rank writes READY_DIR/ready.<rank> (its pid)
once every rank is in the loop. DATALOADER=1: each step also takes a batch from a DataLoader with
two worker processes. RUN_SECONDS=N: a healthy job, every rank ends 0 after N seconds in the loop.
LINGER=1: the failing rank reports its exception, then closes its connections (its victims fail
now) and ends 2 s later, as a rank whose interpreter joins its DataLoader's workers at exit does.
(The main guard: Python 3.14 starts DataLoader workers through a forkserver, which imports this
file again.)"""
import os
import time

import torch
import torch.distributed as dist


def batches():
    data = torch.utils.data.TensorDataset(torch.arange(4096.0))
    while True:
        yield from torch.utils.data.DataLoader(data, batch_size=16, num_workers=2)


def main():
    rank = int(os.environ["RANK"])
    ready = os.environ["READY_DIR"]
    fail_rank = int(os.environ.get("FAIL_RANK", "-1"))
    run_seconds = float(os.environ.get("RUN_SECONDS", "0"))
    dist.init_process_group("gloo")
    loader = batches() if os.environ.get("DATALOADER") == "1" else None
    t = torch.ones(4)
    if loader is not None:
        next(loader)  # the loader's workers run before the rank says it is ready
    dist.all_reduce(t)
    with open(os.path.join(ready, f"ready.{rank}.tmp"), "w") as f:
        f.write(str(os.getpid()))
    os.rename(os.path.join(ready, f"ready.{rank}.tmp"), os.path.join(ready, f"ready.{rank}"))
    start = time.monotonic()
    while True:
        if loader is not None:
            next(loader)
        dist.all_reduce(t)
        if rank == fail_rank and os.path.exists(os.path.join(ready, "go")):
            raise ValueError(f"rank {rank} fails on purpose")
        if run_seconds:
            # Every rank leaves the loop at the same step: the first whose time is up says so.
            done = torch.tensor([1.0 if time.monotonic() - start >= run_seconds else 0.0])
            dist.all_reduce(done, op=dist.ReduceOp.MAX)
            if done.item() > 0:
                break
    dist.destroy_process_group()

if __name__ == "__main__":
    if os.environ.get("LINGER") != "1":
        main()
    else:
        try:
            main()
        except ValueError:
            import sys

            sys.excepthook(*sys.exc_info())  # rankrun's hook records the failure, then the traceback
            dist.destroy_process_group()
            time.sleep(2)
            os._exit(1)
