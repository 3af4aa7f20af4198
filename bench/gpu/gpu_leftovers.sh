#!/usr/bin/env bash
# On a lent machine with one NVIDIA GPU and torch wheels, after bench/gpu/prepare.sh here:
# 1. a torchrun job's worker holding 8 GiB is left behind by SIGKILLing torchrun;
# 2. `rankrun --check` and a rankrun job on that GPU must name the orphan's pid and command;
# 3. the orphan is killed; a rankrun job whose rank 0 holds 8 GiB and exits 3 restarts once:
#    the log shows whether rankrun waited for the memory and for how long.
# Writes $OUT/gpu_leftovers.log. About a minute.
set -u
root="$(cd "$(dirname "$0")/../.." && pwd)"
out="${OUT:-/tmp}"
rankrun="$root/.gpu/build/launcher/rankrun"
export LD_LIBRARY_PATH="$root/.gpu/lib:${LD_LIBRARY_PATH:-}"
exec > >(tee "$out/gpu_leftovers.log") 2>&1
work="$(mktemp -d /tmp/rrgpu.XXXXXX)"
trap 'pkill -9 -f "$work/" 2>/dev/null; rm -rf "$work"' EXIT
echo "=== $(date -Is) $(nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader)"
cat > "$work/hold.py" <<'PY'
import os, sys, time, torch
x = torch.empty(8 << 30, dtype=torch.uint8, device="cuda")
print("holding 8 GiB as pid", os.getpid(), "attempt", os.environ.get("TORCHELASTIC_RESTART_COUNT"), flush=True)
if os.environ.get("EXIT_AFTER_HOLD") and os.environ.get("TORCHELASTIC_RESTART_COUNT") == "0":
    sys.exit(3)
free, total = torch.cuda.mem_get_info()
print("free at start: %.1f GiB of %.1f" % (free / 2**30, total / 2**30), flush=True)
time.sleep(float(os.environ.get("HOLD_SECONDS", "0")))
PY
echo "=== 1. torchrun SIGKILLed while its worker holds 8 GiB"
HOLD_SECONDS=300 torchrun --nproc-per-node 1 "$work/hold.py" &
tr=$!
for _ in $(seq 60); do nvidia-smi --query-compute-apps=pid --format=csv,noheader | grep -q . && break; sleep 0.5; done
kill -9 "$tr"; sleep 1
orphan="$(nvidia-smi --query-compute-apps=pid --format=csv,noheader | head -1 | tr -d ' ')"
echo "orphan: pid $orphan: $(tr '\0' ' ' < /proc/$orphan/cmdline 2>/dev/null)"
nvidia-smi --query-compute-apps=pid,used_memory --format=csv
echo "=== 2a. rankrun --check"
"$rankrun" --nproc-per-node 1 --check --no-python true; echo "rc=$?"
echo "=== 2b. a rankrun job on that GPU"
"$rankrun" --nproc-per-node 1 --no-python true; echo "rc=$?"
echo "=== 2c. --gpu-check=refuse"
"$rankrun" --nproc-per-node 1 --gpu-check refuse --no-python true; echo "rc=$?"
kill -9 "$orphan" 2>/dev/null; sleep 1
echo "=== 3. a restart after a rank that held 8 GiB"
start=$(date +%s.%N)
EXIT_AFTER_HOLD=1 "$rankrun" --nproc-per-node 1 --max-restarts 1 -v "$work/hold.py"; echo "rc=$?"
echo "job took $(echo "$(date +%s.%N) - $start" | bc) s"
echo "=== $(date -Is) done; $(nvidia-smi --query-gpu=memory.used --format=csv,noheader) in use"
