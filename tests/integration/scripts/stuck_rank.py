"""A straggler without PyTorch: rank 1 blocks in a function of its own, rank 0 exits 0 once rank 1
is there (so the hang is detected while rank 1 surely sits in that function).

STUCK_READY: a file path; rank 1 creates it just before it blocks.
"""
import os
import sys
import threading
import time

rank = int(os.environ["RANK"])
ready = os.environ["STUCK_READY"]


def wait_for_a_message_that_never_comes():
    threading.Event().wait()  # the blocking line


if rank == 0:
    deadline = time.monotonic() + 60
    while not os.path.exists(ready):
        if time.monotonic() > deadline:
            sys.exit("rank 1 never got ready")
        time.sleep(0.02)
    sys.exit(0)

with open(ready, "w"):
    pass
wait_for_a_message_that_never_comes()
