"""Multi-node worker without torch: prints `ready rank=R`, then sleeps (SLEEP seconds, default
300). The rank named by FAIL_RANK instead exits FAIL_CODE (default 3) once the file FAIL_FILE
exists (or after FAIL_DELAY seconds when FAIL_FILE is not set)."""
import os
import sys
import time

rank = int(os.environ["RANK"])
print(f"ready rank={rank} local={os.environ.get('LOCAL_RANK')} node={os.environ.get('GROUP_RANK')}", flush=True)

if os.environ.get("FAIL_RANK") is not None and int(os.environ["FAIL_RANK"]) == rank:
    trigger = os.environ.get("FAIL_FILE")
    if trigger:
        while not os.path.exists(trigger):
            time.sleep(0.05)
    else:
        time.sleep(float(os.environ.get("FAIL_DELAY", "0")))
    print(f"rank {rank} fails on purpose", file=sys.stderr, flush=True)
    sys.exit(int(os.environ.get("FAIL_CODE", "3")))

time.sleep(float(os.environ.get("SLEEP", "300")))
