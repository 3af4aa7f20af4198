"""A job to look at while it runs (test_observe.py). Every rank joins gloo and prints `ready`;
rank 0 then sleeps HOLD seconds outside any collective (the straggler) while the others wait in
barrier(), or less once the file $GO_FILE exists (the test has seen what it looks for).
MODE=crash: in the first attempt rank 1 exits 3 right after `ready`."""
import os
import sys
import time

import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
print(f"ready rank={rank}", flush=True)
if os.environ.get("MODE") == "crash" and os.environ.get("TORCHELASTIC_RESTART_COUNT") == "0" and rank == 1:
    sys.exit(3)
if rank == 0:
    go = os.environ.get("GO_FILE")
    deadline = time.monotonic() + float(os.environ.get("HOLD", "6"))
    while time.monotonic() < deadline and not (go and os.path.exists(go)):
        time.sleep(0.1)  # outside any collective
dist.barrier()
dist.destroy_process_group()
