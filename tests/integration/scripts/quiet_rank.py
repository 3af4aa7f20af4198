"""A rank that does a little gloo work, with every warning shown, then sits still for a moment
(long enough for rankrun's sampler to look at it) and exits 0: rankrun's injected code must not
add a single line to its output."""
import time
import warnings

import torch
import torch.distributed as dist

warnings.simplefilter("always")
dist.init_process_group("gloo")
dist.all_reduce(torch.ones(4))
time.sleep(2.5)
dist.barrier()
print("quiet rank done", flush=True)
