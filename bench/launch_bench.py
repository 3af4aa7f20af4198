#!/usr/bin/env python3
"""Launch-to-exit time and the launcher's own peak memory: rankrun against torchrun.

For N = 1, 2, 4, 8 workers, two kinds of worker:
  - native: /bin/true (--no-python): what the launcher itself costs;
  - python: a Python no-op script.
Each cell is the median of --runs runs after one warm-up. "direct" is the same N workers
spawned and waited for by this script, without a launcher; overhead = launcher - direct.
Peak memory is the launcher process's own VmHWM (sampled from /proc while it runs), not its
workers'. torchrun is Debian's (python3-torch 1.13) run with its quirks worked around
(see shared reference): --redirects 9:0 --tee 9:0 (else it crashes on Python 3.11) and
--monitor_interval 0.1 (else exits are noticed up to 5 s late); both make it faster.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import PY, ROOT, built, have_torch_run, kib, proc_status


def run_once(cmd, env):
    """Wall time of `cmd` and the highest VmHWM of its own process, in KiB."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    hwm = 0
    while proc.poll() is None:
        try:
            hwm = max(hwm, kib(proc_status(proc.pid), "VmHWM") or 0)
        except (OSError, ValueError):
            pass
        time.sleep(0.002)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd} exited {proc.returncode}")
    return wall, hwm


def run_direct(worker, n, env):
    start = time.perf_counter()
    procs = [subprocess.Popen(worker, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env) for _ in range(n)]
    for p in procs:
        p.wait()
    return time.perf_counter() - start, 0


def measure(fn, runs):
    fn()  # warm-up
    samples = [fn() for _ in range(runs)]
    return statistics.median(s[0] for s in samples), max(s[1] for s in samples)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", default=str(ROOT / "build"))
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--torchrun-runs", type=int, default=3)
    ap.add_argument("--workers", default="1,2,4,8")
    ap.add_argument("--no-torchrun", action="store_true")
    args = ap.parse_args()

    rankrun = built(args.build_dir, "rankrun")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHON_EXEC=PY)
    env.pop("CUDA_VISIBLE_DEVICES", None)
    tmp = tempfile.mkdtemp(prefix="rankrun-bench-")
    noop = Path(tmp) / "noop.py"
    noop.write_text("pass\n")
    torchrun = not args.no_torchrun and have_torch_run()

    kinds = {"native": (["--no-python", "/bin/true"], ["/bin/true"]),
             "python": ([str(noop)], [PY, "-u", str(noop)])}
    rows = []
    for kind, (launch_args, worker) in kinds.items():
        for n in map(int, args.workers.split(",")):
            direct, _ = measure(lambda: run_direct(worker, n, env), args.runs)
            rr, rr_mem = measure(lambda: run_once([rankrun, "--nproc-per-node", str(n), *launch_args], env), args.runs)
            row = {"kind": kind, "n": n, "direct": direct, "rankrun": rr, "rankrun_mem": rr_mem}
            if torchrun:
                tr_cmd = [PY, "-m", "torch.distributed.run", "--nproc_per_node", str(n), "--redirects", "9:0",
                          "--tee", "9:0", "--monitor_interval", "0.1", "--log_dir", tmp + "/tr",
                          *[a.replace("--no-python", "--no_python") for a in launch_args]]  # 1.13: underscores only
                tr, tr_mem = measure(lambda: run_once(tr_cmd, env), args.torchrun_runs)
                row.update(torchrun=tr, torchrun_mem=tr_mem)
            rows.append(row)
            print(f"# {kind} N={n}: {row}", file=sys.stderr, flush=True)

    ms = lambda s: f"{s * 1000:.1f}"
    print("| workers | N | direct (ms) | rankrun (ms) | rankrun overhead (ms) | target (ms) | rankrun peak RSS (MiB) |"
          + (" torchrun (ms) | torchrun peak RSS (MiB) | torchrun / rankrun |" if torchrun else ""))
    print("| --- " * (7 + (3 if torchrun else 0)) + "|")
    for r in rows:
        line = (f"| {r['kind']} | {r['n']} | {ms(r['direct'])} | {ms(r['rankrun'])} | {ms(r['rankrun'] - r['direct'])} | "
                f"{20 + 2 * r['n']} | {r['rankrun_mem'] / 1024:.1f} |")
        if torchrun:
            line += f" {ms(r['torchrun'])} | {r['torchrun_mem'] / 1024:.0f} | {r['torchrun'] / r['rankrun']:.0f}x |"
        print(line)


if __name__ == "__main__":
    main()
