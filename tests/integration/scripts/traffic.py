"""Collective traffic until told to stop: join the gloo group from the environment, then
all_reduce a 64 KiB tensor (or $TRAFFIC_NUMEL float32s) in a loop, printing `step N` once a
second, until the file named by $GO_FILE exists (or SECONDS pass) on any rank; then barrier,
print `done`.

Rank 0 pauses $TRAFFIC_PAUSE seconds (default 0.02) before each step, as a step's compute
would, while every other rank waits for it inside all_reduce: when a fault comes, all ranks but
one are in a collective, and the job does not keep the machine's cores busy (gloo's waits
block; without the pause a 3-node test's six workers spun both cores, beside the other tests).

    traffic.py SECONDS [WORLD:SECONDS ...]

WORLD:SECONDS gives another duration to a round of that world size (an elastic test lets the
first round run and the next one finish soon)."""
import os
import sys
import time

import torch
import torch.distributed as dist


def main():
    rank, world = os.environ.get("RANK"), os.environ.get("WORLD_SIZE")
    print(f"start RANK={rank} WORLD_SIZE={world} RESTART={os.environ.get('TORCHELASTIC_RESTART_COUNT')}", flush=True)
    dist.init_process_group("gloo")
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 0.0
    for pair in sys.argv[2:]:
        w, s = pair.split(":")
        if w == world:
            seconds = float(s)
    go = os.environ.get("GO_FILE")
    t = torch.ones(int(os.environ.get("TRAFFIC_NUMEL", "16384")))
    pause = float(os.environ.get("TRAFFIC_PAUSE", "0.02")) if rank == "0" else 0.0
    deadline = time.monotonic() + seconds
    next_print = 0.0
    step = 0
    while True:
        if pause:
            time.sleep(pause)
        # Element 0 carries each rank's wish to stop: every rank leaves after the same step.
        t.fill_(1.0)
        t[0] = 1.0 if time.monotonic() >= deadline or (go and os.path.exists(go)) else 0.0
        dist.all_reduce(t)
        if t[0] > 0:
            break
        step += 1
        if time.monotonic() >= next_print:
            print(f"step {step} RANK={rank} WORLD_SIZE={world}", flush=True)
            next_print = time.monotonic() + 1.0
    dist.barrier()
    dist.destroy_process_group()
    print(f"done RANK={rank} WORLD_SIZE={world}", flush=True)


if __name__ == "__main__":
    main()
    sys.exit(0)
