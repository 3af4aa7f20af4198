"""A worker for the GPU-check tests, against the scripted NVML ($RANKRUN_FAKE_NVML's file).
Attempt 0: local rank 0 lists itself on its GPU (HOLD bytes) and, when FOREIGN_PID is set, lists
that process on GPU 1; then it exits 3 (local rank 1 waits to be stopped). Attempt 1: each rank
says whether the state file still lists a process of attempt 0, and exits 0."""
import os
import sys
import time

state = os.environ["RANKRUN_FAKE_NVML"]
local = int(os.environ["LOCAL_RANK"])
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
gpu = os.environ.get("CUDA_VISIBLE_DEVICES", str(local))

if attempt == 0:
    if local == 0:
        with open(state, "a") as f:
            f.write("proc %s %d %s\n" % (gpu, os.getpid(), os.environ.get("HOLD", str(8 << 30))))
            if os.environ.get("FOREIGN_PID"):
                f.write("proc 1 %s %d\n" % (os.environ["FOREIGN_PID"], 3 << 30))
        print("attempt 0 rank 0 holds GPU %s as pid %d" % (gpu, os.getpid()), flush=True)
        sys.exit(3)
    time.sleep(60)
    sys.exit(0)

with open(state) as f:
    listed = [l.split()[2] for l in f if l.startswith("proc %s " % gpu)]
prior = [pid for pid in listed if pid != os.environ.get("FOREIGN_PID")]
print("attempt %d rank %d started; attempt 0's memory listed: %s" % (attempt, local, "yes" if prior else "no"),
      flush=True)
