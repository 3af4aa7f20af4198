"""Slurm test worker: every rank writes $SL_OUT/ready-<RANK> (its time.time()) and sleeps; rank
$SL_FAIL_RANK (default 4) exits $SL_FAIL_CODE (default 3) after $SL_FAIL_AFTER seconds (default
1) and first writes the time of its exit to $SL_OUT/failed-<RANK>."""
import os
import sys
import time

rank = int(os.environ["RANK"])
out = os.environ["SL_OUT"]
ready = os.path.join(out, f"ready-{rank}")
with open(ready + ".tmp", "w") as f:
    f.write(f"{time.time():.6f} {os.getpid()}\n")
os.rename(ready + ".tmp", ready)
if rank == int(os.environ.get("SL_FAIL_RANK", "4")):
    time.sleep(float(os.environ.get("SL_FAIL_AFTER", "1")))
    with open(os.path.join(out, f"failed-{rank}"), "w") as f:
        f.write(f"{time.time():.6f}\n")
    print(f"rank {rank} fails now", file=sys.stderr, flush=True)
    sys.exit(int(os.environ.get("SL_FAIL_CODE", "3")))
time.sleep(300)
