"""Rank 3 sleeps before init_process_group while ranks 0-2 wait in it for rank 3; rank 0 gives
up (exit 5) once ranks 0-2 have joined the store's rendezvous, whatever the time that took on a
busy machine. Each rank's TCPStore client joins it as init_process_group's env:// rendezvous does
(with the world size: the client adds 1 to the key "init/") and then touches $LATE_RANK_DIR/<rank>,
so that rank 0 exits only after the store has seen exactly ranks 0-2 arrive."""
import os
import threading
import time
from datetime import timedelta

import torch.distributed as dist

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
marks = os.environ["LATE_RANK_DIR"]
if rank == 3:
    time.sleep(120)
store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world, False,
                      timedelta(seconds=60))
open(os.path.join(marks, str(rank)), "w").close()


def give_up():
    while not all(os.path.exists(os.path.join(marks, r)) for r in ("0", "1", "2")):
        time.sleep(0.05)
    os._exit(5)


if rank == 0:
    threading.Thread(target=give_up, daemon=True).start()
dist.init_process_group("gloo", store=store, rank=rank, world_size=world)
