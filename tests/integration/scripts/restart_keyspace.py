"""Attempt 0 writes a key to the launcher's store and fails; attempt 1 must not see it."""
import os
import sys
from datetime import timedelta

import torch.distributed as dist

# A torch built without libuv (Debian's 2.x) refuses the default use_libuv=True of 2.4+; 1.13
# has no such parameter.
no_libuv = {"use_libuv": False} if "use_libuv" in (dist.TCPStore.__init__.__doc__ or "") else {}
store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                      timeout=timedelta(seconds=30), **no_libuv)
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
key = f"left-over-{os.environ['RANK']}"
if attempt == 0:
    store.set(key, "stale")
    print("attempt 0 wrote", key, flush=True)
    # every rank writes before any fails, so the stale keys exist when the restart comes
    store.add("written", 1)
    while store.add("written", 0) < int(os.environ["WORLD_SIZE"]):
        pass
    sys.exit(3)
# torch 1.13's Python store has no check(); compare_set on a missing key answers `expected`.
present = store.compare_set(key, "absent", "x") != b"absent"
print("attempt", attempt, "sees", key, ":", present, flush=True)
sys.exit(1 if present else 0)
