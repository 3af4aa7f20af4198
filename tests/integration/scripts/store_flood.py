"""A worker that floods rankrun's store: SETs of 8 MB values until the store refuses one (it
closes the connection) or 40 went in. Prints how many it stored."""
import os
from datetime import timedelta

import torch.distributed as dist

kwargs = {"is_master": False, "timeout": timedelta(seconds=20)}
try:  # torch 2.x asks for libuv by default, which a client does not need (Debian builds it without)
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), use_libuv=False, **kwargs)
except TypeError:  # torch 1.13 has no use_libuv
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), **kwargs)
stored = 0
try:
    for i in range(40):
        store.set(f"flood/{i}", b"x" * (8 << 20))
        store.get(f"flood/{i}")[:1]  # a round trip: the SET was applied, or the connection is gone
        stored += 1
except Exception as exc:  # the store closed the connection
    print(f"refused after {stored}: {type(exc).__name__}", flush=True)
print(f"stored {stored}", flush=True)
