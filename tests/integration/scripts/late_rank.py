"""Ranks 0-2 wait in init_process_group for rank 3, which never joins: once ranks 0-2 have joined
the store's rendezvous, whatever the time that took on a busy machine, rank 3 exits 5. Each of
ranks 0-2 joins it with a TCPStore client as init_process_group's env:// rendezvous does (with the
world size: the client adds 1 to the key "init/") and then touches $LATE_RANK_DIR/<rank>; the
ranks that reached the store are all alive when rankrun hears of the failure.
LATE_RANK_EARLY=1: rank 0 exits 0 right after its mark, its connection closed, before rankrun has
had a look at whose it was (as a rank that finishes early does)."""
import os
import time
from datetime import timedelta

import torch.distributed as dist

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
marks = os.environ["LATE_RANK_DIR"]
if rank == 3:
    while not all(os.path.exists(os.path.join(marks, r)) for r in ("0", "1", "2")):
        time.sleep(0.05)
    os._exit(5)
store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world, False,
                      timedelta(seconds=60))
open(os.path.join(marks, str(rank)), "w").close()
if rank == 0 and os.environ.get("LATE_RANK_EARLY") == "1":
    os._exit(0)
dist.init_process_group("gloo", store=store, rank=rank, world_size=world)
