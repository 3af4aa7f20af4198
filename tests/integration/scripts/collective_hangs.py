"""Ranks that part in their collectives, for the flight recorder's verdict (gloo on CPU, env://
from rankrun). Run as `collective_hangs.py CASE` with two ranks (skip_one: any number).

  op_mismatch   rank 0 calls all_gather, rank 1 broadcast, at the same point: the same sequence
                id, different collectives
  skip_one      a loop of ITERATIONS all_reduces; rank 1 skips the one at SKIP (the way a
                `continue` on one rank's bad batch does), then every rank waits in a barrier
  stays_out     after a broadcast, rank 1 blocks outside any collective (a lock, a dead file
                system) while rank 0 waits in the next all_reduce
  busy_small    thousands of small all_reduces a second for SECONDS (default 12), then "done"
  collective_timeout  a process group with a 3 s timeout; rank 1 sleeps outside the collectives
                while rank 0's all_reduce times out (gloo raises "Timed out waiting ...")

Every line where a rank is expected to block is marked `# the blocking line: <case> rank <r>`.
"""
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist

case = sys.argv[1]
rank = int(os.environ["RANK"])
ITERATIONS = 1000
SKIP = 500


def op_mismatch():
    dist.init_process_group("gloo")
    t = torch.ones(4)
    for _ in range(3):
        dist.all_reduce(t)
    if rank == 0:
        out = [torch.zeros(4) for _ in range(dist.get_world_size())]
        dist.all_gather(out, t)  # the blocking line: op_mismatch rank 0
    else:
        dist.broadcast(t, src=0)  # the blocking line: op_mismatch rank 1
    dist.barrier()


def skip_one():
    dist.init_process_group("gloo")
    t = torch.ones(16)
    for i in range(ITERATIONS):
        if rank == 1 and i == SKIP:
            continue  # rank 1's bad batch
        dist.all_reduce(t)  # the blocking line: skip_one rank 0
        t.fill_(1.0)
    print(f"rank {rank}: loop done", flush=True)
    dist.barrier()  # the blocking line: skip_one rank 1
    dist.destroy_process_group()


def stays_out():
    dist.init_process_group("gloo")
    t = torch.ones(4)
    dist.all_reduce(t)
    dist.broadcast(t, src=0)
    if rank == 1:
        time.sleep(600)  # the blocking line: stays_out rank 1
    dist.all_reduce(t)  # the blocking line: stays_out rank 0


def collective_timeout():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=3))
    t = torch.ones(4)
    dist.all_reduce(t)
    if rank == 1:
        time.sleep(60)  # the blocking line: collective_timeout rank 1
    dist.all_reduce(t)  # the blocking line: collective_timeout rank 0


def busy_small():
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 12.0
    dist.init_process_group("gloo")
    t = torch.ones(8)
    count = 0
    deadline = time.monotonic() + seconds
    while True:
        for _ in range(200):
            dist.all_reduce(t)
            t.fill_(1.0)
        count += 200
        going_on = torch.tensor([1.0 if time.monotonic() < deadline else 0.0])
        dist.all_reduce(going_on, op=dist.ReduceOp.MIN)
        if going_on.item() == 0.0:
            break
    print(f"done {count}", flush=True)
    dist.destroy_process_group()


{"op_mismatch": op_mismatch, "skip_one": skip_one, "stays_out": stays_out, "collective_timeout": collective_timeout, "busy_small": busy_small}[case]()
