"""Rank 3 sleeps before init_process_group while ranks 0-2 wait in it for rank 3; rank 0 gives
up (exit 5) GIVE_UP_AFTER seconds (default 4) after ranks 1 and 2 are about to enter it: each
touches $LATE_RANK_DIR/<rank> first, so that a busy machine, on which importing torch takes
longer than the wait, does not change who reached the store."""
import os
import threading
import time

import torch.distributed as dist

rank = int(os.environ["RANK"])
marks = os.environ.get("LATE_RANK_DIR")
if rank == 3:
    time.sleep(120)
if rank in (1, 2) and marks:
    open(os.path.join(marks, str(rank)), "w").close()


def give_up():
    while marks and not all(os.path.exists(os.path.join(marks, r)) for r in ("1", "2")):
        time.sleep(0.05)
    time.sleep(float(os.environ.get("GIVE_UP_AFTER", "4")))
    os._exit(5)


if rank == 0:
    threading.Thread(target=give_up, daemon=True).start()
dist.init_process_group("gloo")
