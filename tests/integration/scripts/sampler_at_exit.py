"""A rank whose last atexit handler (registered first, so it runs last) says whether rankrun's
sampler thread still runs: it must have ended before the interpreter finalizes, where a daemon
thread that wakes is torn down under whatever native code is still running."""
import atexit
import threading
import time


def report():
    alive = [t.name for t in threading.enumerate() if t.name == "rankrun-sampler" and t.is_alive()]
    print("sampler at exit: %s" % ("running" if alive else "ended"), flush=True)


atexit.register(report)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

dist.init_process_group("gloo")
dist.all_reduce(torch.ones(4))
time.sleep(0.3)
started = any(t.name == "rankrun-sampler" for t in threading.enumerate())
print("sampler started: %s" % started, flush=True)
dist.destroy_process_group()
