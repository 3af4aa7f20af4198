"""Rank 3 sleeps before init_process_group; rank 0 gives up after a few seconds (exit 5)
while ranks 0-2 wait in init_process_group for rank 3."""
import os
import threading
import time

import torch.distributed as dist

rank = int(os.environ["RANK"])
if rank == 3:
    time.sleep(120)
if rank == 0:
    threading.Timer(float(os.environ.get("GIVE_UP_AFTER", "4")), lambda: os._exit(5)).start()
dist.init_process_group("gloo")
