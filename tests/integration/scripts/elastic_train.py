"""Elastic check: print the launcher's variables (RANK, WORLD_SIZE, TORCHELASTIC_RESTART_COUNT...), join the
gloo group from the environment (env://), all_reduce a 1 (the sum is the world size), print it,
sleep, print `done`.

    elastic_train.py SECONDS [WORLD:SECONDS ...]

sleeps SECONDS, or the SECONDS of the WORLD:SECONDS pair naming this round's world size (so a
test can keep the first round running and let the restarted one finish quickly). The sleep ends
early once the file named by $GO_FILE exists (so a test can end the job when it is ready)."""
import os
import sys
import time

import torch
import torch.distributed as dist


KEYS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK",
        "ROLE_WORLD_SIZE", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_RUN_ID", "MASTER_ADDR", "MASTER_PORT")


def main():
    rank, world = os.environ.get("RANK"), os.environ.get("WORLD_SIZE")
    print("start " + " ".join(f"{k}={os.environ.get(k, '<unset>')}" for k in KEYS), flush=True)
    dist.init_process_group("gloo")
    t = torch.ones(1)
    dist.all_reduce(t)
    print(f"sum={t.item():.0f} WORLD_SIZE={world} RANK={rank}", flush=True)
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 0.0
    for pair in sys.argv[2:]:
        w, s = pair.split(":")
        if w == world:
            seconds = float(s)
    go = os.environ.get("GO_FILE")
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not (go and os.path.exists(go)):
        time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))
    dist.barrier()
    dist.destroy_process_group()
    print(f"done RANK={rank} WORLD_SIZE={world}", flush=True)


if __name__ == "__main__":
    main()
    sys.exit(0)
