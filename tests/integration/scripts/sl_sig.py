"""Slurm test worker: logs every SIGUSR1, SIGUSR2 and SIGTERM it gets to $SL_OUT/sig-<RANK>.log
(`<time.time()> <name>`), writes $SL_OUT/ready-<RANK> (`<time> <pid>`) once its handlers are in
place, and sleeps. On SIGTERM it dies of SIGTERM, as the default action would.

The log is written with os.write on an O_APPEND descriptor: the same signal often comes twice at
once (from Slurm, which signals every process of a step, and forwarded by rankrun), and Python may
run the second handler inside the first; a buffered file object would raise "reentrant call"."""
import os
import signal
import time

rank = int(os.environ["RANK"])
out = os.environ["SL_OUT"]
log = os.open(os.path.join(out, f"sig-{rank}.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)


def note(signo, _frame):
    os.write(log, f"{time.time():.6f} {signal.Signals(signo).name}\n".encode())
    if signo == signal.SIGTERM:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)


for s in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM):
    signal.signal(s, note)
ready = os.path.join(out, f"ready-{rank}")
with open(ready + ".tmp", "w") as f:
    f.write(f"{time.time():.6f} {os.getpid()}\n")
os.rename(ready + ".tmp", ready)
deadline = time.monotonic() + 300
while time.monotonic() < deadline:
    time.sleep(0.1)
