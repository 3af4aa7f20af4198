"""Jobs on rankrun's Python runtime (rankrun.data, rankrun.progress) for test_python_runtime.py,
one scenario per first argument; real torch.distributed (gloo) where ranks must be in collectives.

  seed002 [--even shortest|longest]   a hand-written data interface that gives rank r 6 + 2r batches
                                      (field report 002), DDP over it, wrapped in even_batches or not
  seed001 --even shortest|longest     DDP with uneven inputs (rank r has 5 + r inputs), field report 001
  own-lengths                         BucketSampler, but each rank gives it the lengths of its own
                                      files (a bug of the script's): the plans differ in length, and
                                      rank 0 waits at the epoch's end barrier while rank 1 trains on
  steps SECONDS                       a loop that steps 20 times a second for SECONDS
  section SECONDS TIMEOUT             rank 0 checkpoints in a section for SECONDS while the others wait
                                      in a barrier
  stop-beating                        every rank steps, then rank 1 stops stepping and sleeps
  beating SECONDS                     rank 0 calls heartbeat() twice a second, rank 1 sleeps alike
"""
import sys
import time

import rankrun.data
import rankrun.progress


def ddp():
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group("gloo")
    model = DistributedDataParallel(torch.nn.Linear(4, 1))
    return torch, dist, model, torch.optim.SGD(model.parameters(), lr=0.01)


def finish(dist):
    """The group goes after the model (the caller dropped it): with torch 1.13, a gloo group torn
    down by a DDP model's reducer while the interpreter lock is held can wait forever for a worker
    thread that needs the lock (torch's bug, seen here 1 run in 4 when the model outlived
    destroy_process_group)."""
    dist.barrier()
    dist.destroy_process_group()


def train_on(batches, torch, model, optimizer):
    n = 0
    for x in batches:
        loss = model(x).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        rankrun.progress.step()
        n += 1
    return n


class HandWritten:
    """Seed 002's data interface: next_batch() until it returns None; each rank its own count."""

    def __init__(self, torch, rank):
        self.torch, self.left = torch, 6 + 2 * rank

    def next_batch(self):
        if self.left == 0:
            return None
        self.left -= 1
        return self.torch.ones(2, 4)


def seed002(even):
    torch, dist, model, optimizer = ddp()
    rank = dist.get_rank()

    def batches():  # a generator over the interface: no len(), as the report had it
        source = HandWritten(torch, rank)
        while (b := source.next_batch()) is not None:
            yield b

    class Epoch:  # iter() gives a new pass over the interface each time (what 'longest' needs)
        def __iter__(self):
            return batches()

    source = rankrun.data.even_batches(Epoch(), policy=even) if even else batches()
    n = train_on(source, torch, model, optimizer)
    print(f"rank {rank} trained on {n} batches", flush=True)
    del model, optimizer
    finish(dist)


def seed001(even):
    torch, dist, model, optimizer = ddp()
    rank = dist.get_rank()
    inputs = [torch.full((2, 4), float(i)) for i in range(5 + rank)]  # a list: len() known ahead
    n = train_on(rankrun.data.even_batches(inputs, policy=even), torch, model, optimizer)
    print(f"rank {rank} trained on {n} batches", flush=True)
    del model, optimizer
    finish(dist)


def own_lengths():
    torch, dist, model, optimizer = ddp()
    rank = dist.get_rank()
    sampler = rankrun.data.BucketSampler([1 + i % 40 for i in range(100 + 100 * rank)], [10, 20], [8, 4, 2], seed=3)
    n = 0
    for batch in sampler:
        x = torch.ones(len(batch), 4)
        model(x).sum().backward()
        optimizer.step()
        n += 1
    print(f"rank {rank} done after {n} batches", flush=True)
    dist.barrier()  # the end of the epoch


def steps(seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        rankrun.progress.step()
        time.sleep(0.05)
    print(f"stepped to {rankrun.progress.current_step()}", flush=True)


def section(seconds, timeout):
    torch, dist, model, _ = ddp()
    if dist.get_rank() == 0:
        rankrun.progress.step()
        with rankrun.progress.section("checkpoint", timeout=timeout):
            time.sleep(seconds)  # a slow save: no CPU, no output, no collective
    dist.barrier()
    print("after the checkpoint", flush=True)
    del model
    finish(dist)


def beating(seconds):
    import os

    rank = int(os.environ["RANK"])
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if rank == 0:
            rankrun.progress.heartbeat()
        time.sleep(0.5)


def stop_beating():
    import os

    rank = int(os.environ["RANK"])
    for _ in range(10):
        rankrun.progress.step()
        time.sleep(0.05)
    if rank == 1:
        time.sleep(600)  # stuck, without a collective: only the heartbeat tells
    print("done", flush=True)


if __name__ == "__main__":
    kind, args = sys.argv[1], sys.argv[2:]
    if kind == "seed002":
        seed002(args[1] if args[:1] == ["--even"] else None)
    elif kind == "seed001":
        seed001(args[1])
    elif kind == "own-lengths":
        own_lengths()
    elif kind == "steps":
        steps(float(args[0]))
    elif kind == "section":
        section(float(args[0]), float(args[1]))
    elif kind == "beating":
        beating(float(args[0]))
    elif kind == "stop-beating":
        stop_beating()
    else:
        raise SystemExit(f"unknown scenario {kind}")
