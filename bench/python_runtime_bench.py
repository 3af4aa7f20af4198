#!/usr/bin/python3
"""What rankrun's Python package costs a training script: rankrun.data's samplers and
even_batches, and rankrun.progress's calls; docs/benchmarks/python-runtime.md.

    /usr/bin/python3 bench/python_runtime_bench.py [--build-dir build] [--write]
    /usr/bin/python3 bench/python_runtime_bench.py --tiny     # every part at a size of seconds (make test)

Four parts, each with its peer in the same run where it has one:

  1. Planning one epoch of 10,000,000 samples for rank 3 of 8 (shuffle, seed 0, epoch 1):
     list(rankrun.data.DistributedSampler(10_000_000, ...)) against
     list(torch.utils.data.DistributedSampler(range(10_000_000), ...)), both built and
     set_epoch(1) inside the timing, alternating which goes first, --plan-runs runs each; and
     rankrun.data.BucketSampler over 10,000,000 lengths (no torch peer): building it, its plan
     (set_epoch and len()) and reading every batch of the epoch. One process of
     /usr/bin/python3 with the tree's packaging/python and the build's librankrun_worker.
     Goal: the plan no slower than torch's.
  2. The cost of one call of rankrun.progress.step() and heartbeat() inside a rankrun worker
     (`rankrun --nproc-per-node 2`: the heartbeat thread running, its store connection live),
     timed over --calls calls per round in loops of the same form as references (os.getpid(),
     a ctypes call and a Python function that does nothing); and the same outside rankrun, where no store is
     set and every call only counts. Goal: under 5 µs a call inside rankrun.
  3. What rankrun.data.even_batches adds per batch in the same 2-rank job, torch.distributed
     initialised with gloo: a list of --known-batches batches (its len() is agreed once per epoch,
     one all_gather) and a generator of --gen-batches batches (no len(): one all_reduce per batch),
     each against iterating the same source plainly. Each rank times its own epochs.
  4. A 2-rank gloo DDP training loop (3 x Linear(256, 256), batch 32, MSE loss, SGD) under rankrun,
     in one job that calls rankrun.progress.step() after every step and one that does not; one
     job of each per round, their order alternating, --ddp-rounds rounds, the change paired round
     by round. Goal: no slower, within the noise.

The tables give the median over rounds (and ranks, where each rank times its own) and the
range. --write replaces the section of docs/benchmarks/python-runtime.md. About 4 minutes with the
defaults on 2 cores.
"""
import argparse
import datetime
import hashlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from benchlib import PY, ROOT, built, fmt, log, require_built

TAG = "PYRTBENCH "
SECTION = "## rankrun.data and rankrun.progress against torch"
PACKAGE = ROOT / "packaging" / "python"
PACKAGE_FILES = ("_native.py", "data.py", "progress.py")

# --- the scripts that run the parts -----------------------------------------------------------------

PLAN = r'''
import array, json, sys, time
import numpy
import torch
from torch.utils.data import DistributedSampler as TorchSampler
import rankrun.data as data
from rankrun import _native

size, runs, bucket_size, bucket_runs = (int(a) for a in sys.argv[1:5])
REPLICAS, RANK = 8, 3


def ours(n):
    s = data.DistributedSampler(n, num_replicas=REPLICAS, rank=RANK, shuffle=True, seed=0)
    s.set_epoch(1)
    return list(s)


def theirs(n):
    s = TorchSampler(range(n), num_replicas=REPLICAS, rank=RANK, shuffle=True, seed=0)
    s.set_epoch(1)
    return list(s)


def timed(fn, n):
    t0 = time.perf_counter()
    got = fn(n)
    return time.perf_counter() - t0, got


ours(1000), theirs(1000)  # the library loaded, torch's code warm: not timed
share = -(-size // REPLICAS)
times = {"rankrun": [], "torch": []}
for r in range(runs):
    order = [("rankrun", ours), ("torch", theirs)]
    if r % 2:
        order.reverse()
    for name, fn in order:
        seconds, got = timed(fn, size)
        if len(got) != share:
            raise SystemExit(f"{name}: {len(got)} indices for rank {RANK} of {REPLICAS}, not {share}")
        if r == 0 and (min(got) < 0 or max(got) >= size or len(set(got)) != share):
            raise SystemExit(f"{name}: the indices are not {share} distinct samples of range({size})")
        times[name].append(seconds)
        del got
print("PYRTBENCH " + json.dumps({"part": "plan", "size": size, "replicas": REPLICAS, "rank": RANK,
                                 "seconds": times, "torch": torch.__version__, "python": sys.version.split()[0],
                                 "library": _native.library_path()}), flush=True)

# BucketSampler: lengths 1-511, drawn once; boundaries 64 and 256, batch sizes 64, 16, 4.
lengths = array.array("Q")
lengths.frombytes(numpy.random.default_rng(0).integers(1, 512, size=bucket_size, dtype=numpy.uint64).tobytes())
BOUNDARIES, BATCH_SIZES = [64, 256], [64, 16, 4]
parts = {"build": [], "plan": [], "iterate": []}
batches = samples = 0
for r in range(bucket_runs):
    t0 = time.perf_counter()
    b = data.BucketSampler(lengths, BOUNDARIES, BATCH_SIZES, num_replicas=REPLICAS, rank=RANK, shuffle=True, seed=0)
    t1 = time.perf_counter()
    b.set_epoch(1)
    batches = len(b)
    t2 = time.perf_counter()
    samples = 0
    for batch in b:
        samples += len(batch)
    t3 = time.perf_counter()
    parts["build"].append(t1 - t0)
    parts["plan"].append(t2 - t1)
    parts["iterate"].append(t3 - t2)
    del b
print("PYRTBENCH " + json.dumps({"part": "buckets", "size": bucket_size, "boundaries": BOUNDARIES,
                                 "batch_sizes": BATCH_SIZES, "batches": batches, "samples": samples,
                                 "seconds": parts}), flush=True)
'''

RUNTIME = r'''
import hashlib, json, os, sys, time
mode = sys.argv[1]
calls, call_rounds, known_batches, gen_batches, batch_rounds = (int(a) for a in sys.argv[2:7])
import rankrun, rankrun.progress as progress
from rankrun import _native

here = os.path.dirname(os.path.abspath(rankrun.__file__))
text = b""
for name in ("_native.py", "data.py", "progress.py"):
    with open(os.path.join(here, name), "rb") as f:
        text += f.read()
rank = int(os.environ.get("RANK", "0"))


def nothing():
    pass


def per_call_ns(fn, n):
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n * 1e9


progress.step()  # the heartbeat made (its thread, its store connection) before any timing
handle = progress._handle
lib = _native.lib()
beats = (lambda: lib.rankrun_progress_beats(handle)) if handle is not None else (lambda: 0)
import functools
calls_of = {"step": progress.step, "heartbeat": progress.heartbeat, "getpid": os.getpid, "nothing": nothing,
            # the cheapest function of the library through ctypes (it reads a counter; given no handle, returns 0)
            "ctypes": functools.partial(lib.rankrun_progress_beats, handle)}
names = list(calls_of)
ns = {k: [] for k in names}
beats0, t0 = beats(), time.monotonic()
for r in range(call_rounds):
    for k in names[r % len(names):] + names[:r % len(names)]:
        ns[k].append(per_call_ns(calls_of[k], calls))
elapsed, written = time.monotonic() - t0, beats() - beats0
print("PYRTBENCH " + json.dumps({
    "part": "calls", "mode": mode, "rank": rank, "ns": ns, "calls": calls, "live": handle is not None,
    "beats": written, "seconds": elapsed, "interval_ms": os.environ.get("RANKRUN_HEARTBEAT_INTERVAL_MS"),
    "package_sha": hashlib.sha1(text).hexdigest(), "package": here, "library": _native.library_path(),
    "python": sys.version.split()[0]}), flush=True)
if mode != "rankrun":
    sys.exit(0)

import torch
import torch.distributed as dist
from rankrun.data import even_batches

dist.init_process_group("gloo")


class Reducing:
    """The reference: n items, each after one dist.all_reduce of one int64 (what even_batches
    makes per batch of a source without len(), without its Python around it)."""

    def __init__(self, n):
        self.n = n
        self.flag = torch.zeros(1, dtype=torch.int64)

    def __iter__(self):
        for i in range(self.n):
            self.flag.fill_(1)
            dist.all_reduce(self.flag, op=dist.ReduceOp.MIN)
            yield i


class Generated:
    """A source without len(): each epoch a new generator."""

    def __init__(self, n):
        self.n = n

    def __iter__(self):
        return (i for i in range(self.n))


listed = list(range(known_batches))
generated = Generated(gen_batches)
sources = {
    "list": (listed, known_batches),
    "even_list": (even_batches(listed), known_batches),
    "generator": (generated, gen_batches),
    "even_generator": (even_batches(generated), gen_batches),
    "collective": (Reducing(gen_batches), gen_batches),
}


def epoch(source, want):
    dist.barrier()
    t0 = time.perf_counter()
    it = iter(source)
    next(it)
    t1 = time.perf_counter()
    n = 1
    for _ in it:
        n += 1
    t2 = time.perf_counter()
    if n != want:
        raise SystemExit(f"{n} batches, not {want}")
    return (t2 - t0) / n * 1e6, (t1 - t0) * 1e6


for source, want in sources.values():  # one epoch each untimed: gloo's first collectives, warm code
    epoch(source, want)
kinds = list(sources)
per_batch = {k: [] for k in kinds}
first = {k: [] for k in kinds}
for r in range(batch_rounds):
    for k in kinds[r % len(kinds):] + kinds[:r % len(kinds)]:
        us, first_us = epoch(*sources[k])
        per_batch[k].append(us)
        first[k].append(first_us)
print("PYRTBENCH " + json.dumps({
    "part": "batches", "rank": rank, "per_batch_us": per_batch, "first_us": first,
    "batches": {k: want for k, (_, want) in sources.items()}, "torch": torch.__version__,
    "threads": torch.get_num_threads()}), flush=True)
dist.destroy_process_group()
'''

TRAIN = r'''
import json, os, sys, time
import torch
import torch.distributed as dist
from torch import nn

with_step, warmup, steps = (int(a) for a in sys.argv[1:4])
window = float(sys.argv[4])
if with_step:
    import rankrun.progress as progress
    from rankrun import _native
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = nn.parallel.DistributedDataParallel(nn.Sequential(
    nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 256)))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(32, 256), torch.randn(32, 256)


def train_step():
    opt.zero_grad(set_to_none=True)
    nn.functional.mse_loss(model(x), y).backward()
    opt.step()


def loop(n, windows=None):
    """n steps; with `windows`, the time per step of each window of about `window` seconds is
    appended to it (a clock read per step, in both kinds of job alike)."""
    clock = time.perf_counter
    step = progress.step if with_step else None
    start, done = clock(), 0
    for _ in range(n):
        train_step()
        if with_step:
            step()
        if windows is not None:
            done += 1
            now = clock()
            if now - start >= window:
                windows.append((now - start) / done)
                start, done = now, 0
    if windows is not None and not windows:
        windows.append((clock() - start) / max(1, done))


loop(warmup)
beats0 = _native.lib().rankrun_progress_beats(progress._handle) if with_step and progress._handle else 0
dist.barrier()
cpu0, t0 = time.process_time(), time.perf_counter()
windows = []
loop(steps, windows)
t1, cpu1 = time.perf_counter(), time.process_time()
beats = (_native.lib().rankrun_progress_beats(progress._handle) if with_step and progress._handle else 0) - beats0
totals = torch.tensor([t1 - t0, cpu1 - cpu0, float(beats)], dtype=torch.float64)
dist.all_reduce(totals)
wall, cpu, beats = (v / world for v in totals.tolist())
if rank == 0:
    print("PYRTBENCH " + json.dumps({
        "part": "train", "with_step": bool(with_step), "steps": steps, "per_step_us": wall / steps * 1e6,
        "cpu_per_step_us": cpu / steps * 1e6, "beats": beats, "best_window_us": min(windows) * 1e6,
        "live": bool(with_step and progress._handle is not None), "step": progress.current_step() if with_step else None,
        "threads": torch.get_num_threads()}), flush=True)
del model, opt  # DDP's reducer holds the process group: let it go while the interpreter is whole
dist.destroy_process_group()
'''

# --- running them -----------------------------------------------------------------------------------

# What makes a process a launched worker (a store, a rank): none of it in the runs outside rankrun.
LAUNCH_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK",
               "ROLE_WORLD_SIZE", "ROLE_NAME", "MASTER_ADDR", "MASTER_PORT")


def library(build):
    """The build's librankrun_worker (the versioned name rankrun's workers get)."""
    base = Path(build) / "worker_runtime"
    for name in ("librankrun_worker.so.0.1", "librankrun_worker.so"):
        if (base / name).exists():
            return str(base / name)
    raise SystemExit(f"{base}/librankrun_worker.so missing: build the worker runtime first (make build)")


def outside_env(build):
    env = {k: v for k, v in os.environ.items()
           if k not in LAUNCH_VARS and not k.startswith(("RANKRUN_", "TORCHELASTIC_", "PET_"))}
    env.update(PYTHONPATH=str(PACKAGE), RANKRUN_WORKER_LIBRARY=library(build), OMP_NUM_THREADS="1",
               PYTHONUNBUFFERED="1")
    env.pop("CUDA_VISIBLE_DEVICES", None)
    return env


def rankrun_env():
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARS and not k.startswith(("TORCHELASTIC_", "PET_"))}
    env.update(OMP_NUM_THREADS="1", PYTHON_EXEC=PY, PYTHONUNBUFFERED="1")
    env["PATH"] = "/usr/bin:" + env.get("PATH", "")
    for name in ("PYTHONPATH", "RANKRUN_WORKER_LIBRARY", "CUDA_VISIBLE_DEVICES"):
        env.pop(name, None)  # rankrun gives its workers its own package and library
    return env


def tagged(output):
    return [json.loads(line[line.find(TAG) + len(TAG):]) for line in output.splitlines() if TAG in line]


def run(cmd, env, cwd, timeout, what):
    """The results that `cmd` printed; an executable being rebuilt (missing or not executable for a
    moment) is waited for, up to 2 minutes."""
    for attempt in range(60):
        try:
            proc = subprocess.run([str(c) for c in cmd], env=env, cwd=cwd, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
            break
        except OSError as e:  # ENOENT, EACCES, ETXTBSY while the build replaces it
            if attempt == 59:
                raise SystemExit(f"{what}: {cmd[0]}: {e}")
            time.sleep(2)
    results = tagged(proc.stdout)
    if proc.returncode != 0 or not results:
        sys.stderr.write(proc.stdout[-4000:])
        raise SystemExit(f"{what}: exit {proc.returncode}, {len(results)} results")
    return results


def git(*args):
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True).stdout.strip()


def code_state():
    """HEAD, and the uncommitted changes: in the code measured (the package and the worker
    runtime) and elsewhere."""
    try:
        head = git("rev-parse", "--short", "HEAD") or "?"
        changed = [l[3:] for l in git("status", "--porcelain").splitlines()]
    except OSError:
        return {"head": "?", "measured": [], "other": 0}
    measured = [p for p in changed if p.startswith(("packaging/python/rankrun/", "worker_runtime/"))]
    return {"head": head, "measured": measured, "other": len(changed) - len(measured)}


def tree_package_sha():
    text = b""
    for name in PACKAGE_FILES:
        text += (PACKAGE / "rankrun" / name).read_bytes()
    return hashlib.sha1(text).hexdigest()


def run_all(args):
    build = os.path.abspath(args.build_dir)
    rankrun = built(build, "rankrun")
    require_built([rankrun], "build rankrun first (make build)")
    lib = library(build)
    tmp = tempfile.mkdtemp(prefix="rankrun-python-runtime-bench-")
    for name, text in (("plan.py", PLAN), ("runtime.py", RUNTIME), ("train.py", TRAIN)):
        Path(tmp, name).write_text(text)
    code0, sha0, load0, t_start = code_state(), tree_package_sha(), os.getloadavg()[0], time.time()
    built0 = os.stat(rankrun).st_mtime
    log(f"{os.cpu_count()} CPUs, load average {load0:.2f}; rankrun {rankrun}, library {lib}")
    out = {}
    try:
        log(f"1. plans: {args.plan_size:,} samples x {args.plan_runs}, BucketSampler {args.bucket_size:,} x "
            f"{args.bucket_runs}")
        t = time.time()
        for r in run([PY, Path(tmp, "plan.py"), args.plan_size, args.plan_runs, args.bucket_size, args.bucket_runs],
                     outside_env(build), tmp, args.job_timeout, "the plans"):
            out[r["part"]] = r
        log(f"   {time.time() - t:.1f} s")
        log(f"2. calls outside rankrun: {args.calls:,} x {args.call_rounds}")
        out["outside"] = run([PY, Path(tmp, "runtime.py"), "outside", args.calls, args.call_rounds, 0, 0, 0],
                             outside_env(build), tmp, args.job_timeout, "the calls outside rankrun")
        log(f"2-3. rankrun --nproc-per-node 2: calls, then even_batches ({args.known_batches:,} and "
            f"{args.gen_batches:,} batches x {args.batch_rounds})")
        t = time.time()
        results = run([rankrun, "--nproc-per-node", "2", Path(tmp, "runtime.py"), "rankrun", args.calls,
                       args.call_rounds, args.known_batches, args.gen_batches, args.batch_rounds],
                      rankrun_env(), tmp, args.job_timeout, "the rankrun job of parts 2 and 3")
        out["inside"] = [r for r in results if r["part"] == "calls"]
        out["batches"] = [r for r in results if r["part"] == "batches"]
        if len(out["inside"]) != 2 or len(out["batches"]) != 2:
            raise SystemExit(f"the rankrun job of parts 2 and 3 gave {len(out['inside'])} and {len(out['batches'])} "
                             "results, not 2 and 2")
        log(f"   {time.time() - t:.1f} s")
        out["train"] = {"without": [], "with": []}
        for rnd in range(args.ddp_rounds):
            order = ["without", "with"] if rnd % 2 == 0 else ["with", "without"]
            for kind in order:
                t = time.time()
                (r,) = run([rankrun, "--nproc-per-node", "2", Path(tmp, "train.py"), int(kind == "with"),
                            args.warmup, args.steps, args.window], rankrun_env(), tmp, args.job_timeout, f"the DDP job {kind} step()")
                out["train"][kind].append(r)
                log(f"4. round {rnd + 1} {kind} step(): {r['per_step_us']:.0f} µs per step; job {time.time() - t:.1f} s")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    inside = out["inside"][0]
    out["info"] = {
        "date": datetime.date.today().isoformat(), "cpus": os.cpu_count(), "uname": f"{os.uname().sysname} "
        f"{os.uname().release}", "python": out["plan"]["python"], "torch": out["plan"]["torch"],
        "threads": out["batches"][0]["threads"], "load0": load0, "load1": os.getloadavg()[0],
        "minutes": (time.time() - t_start) / 60, "code0": code0, "code1": code_state(), "tree_sha0": sha0,
        "tree_sha1": tree_package_sha(), "worker_shas": sorted({r["package_sha"] for r in out["inside"]}),
        "outside_sha": out["outside"][0]["package_sha"], "worker_library": inside["library"],
        "outside_library": out["outside"][0]["library"], "interval_ms": inside["interval_ms"],
        "rebuilt": os.stat(rankrun).st_mtime != built0,
    }
    return out


# --- the report -------------------------------------------------------------------------------------

CALLS = (("step", "`rankrun.progress.step()`"), ("heartbeat", "`rankrun.progress.heartbeat()`"),
         ("getpid", "`os.getpid()` (reference)"),
         ("ctypes", "a ctypes call of librankrun_worker's `rankrun_progress_beats` (reference)"),
         ("nothing", "a Python function that does nothing (reference)"))
TRAIN_METRICS = (("per_step_us", "whole loop"), ("best_window_us", "fastest window"),
                 ("cpu_per_step_us", "process CPU"))
SOURCES = (("list", "a list (plain)"), ("even_list", "`even_batches(list)`: len() agreed once per epoch"),
           ("generator", "a generator (plain)"), ("even_generator", "`even_batches(generator)`: one all_reduce per batch"),
           ("collective", "reference: `dist.all_reduce` of one int64 per item"))


def pooled(results, key, name):
    """Every rank's values of results[*][key][name], together."""
    return [v for r in results for v in r[key][name]]


def ms(values, digits=0):
    return fmt(values, 1e3, digits)


def times(ratios):
    """'2.86x (2.50-3.10)': the median ratio and the range; one ratio alone."""
    r = sorted(ratios)
    if len(r) == 1:
        return f"{r[0]:.2f}x"
    return f"{statistics.median(r):.2f}x ({r[0]:.2f}-{r[-1]:.2f})"


def paired(a, b):
    """a[i] / b[i] - 1 for each round, sorted."""
    return sorted(x / y - 1 for x, y in zip(a, b))


def noise(changes):
    """Half the range of the paired changes, and never less than 1.5% (on 2 shared cores, smaller
    differences come and go from run to run)."""
    return max(0.015, (changes[-1] - changes[0]) / 2)


def beyond_noise(changes):
    """Every round slower than its pair, and the median change larger than the scatter."""
    return changes[0] > 0 and statistics.median(changes) > noise(changes)


def pct(x):
    return f"{x * 100:+.1f}%"


def para(text):
    return textwrap.fill(" ".join(text.split()), width=100, break_on_hyphens=False, break_long_words=False)


def bullet(text):
    return textwrap.fill(" ".join(text.split()), width=100, initial_indent="- ", subsequent_indent="  ",
                         break_on_hyphens=False, break_long_words=False)


def md_table(columns, rows):
    return "\n".join(["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
                     + ["| " + " | ".join(r) + " |" for r in rows])


def report(out, args):
    """{'tables': [...], 'verdicts': [...], 'facts': {...}}: the tables of the four parts and what they say."""
    plan, buckets, info = out["plan"], out["buckets"], out["info"]
    ours, theirs = plan["seconds"]["rankrun"], plan["seconds"]["torch"]
    ratio = sorted(t / o for o, t in zip(ours, theirs))
    t1 = md_table(
        ["sampler", "ms: median (min-max)", "torch's time / rankrun's (paired by run)"],
        [["`list(rankrun.data.DistributedSampler(...))`", ms(ours), times(ratio)],
         ["`list(torch.utils.data.DistributedSampler(...))`", ms(theirs), "1x"]])
    b = buckets["seconds"]
    total = [x + y + z for x, y, z in zip(b["build"], b["plan"], b["iterate"])]
    t1b = md_table(
        [f"BucketSampler, {buckets['size']:,} lengths", "ms: median (min-max)"],
        [["build (copies the lengths)", ms(b["build"])], ["plan (`set_epoch`, `len()`)", ms(b["plan"])],
         [f"read the epoch's {buckets['batches']:,} batches ({buckets['samples']:,} samples)", ms(b["iterate"])],
         ["in all", ms(total)]])

    inside, outside = out["inside"], out["outside"]
    t2 = md_table(
        ["call", "inside a rankrun worker, ns per call: median (min-max)", "outside rankrun (no store: a no-op)"],
        [[title, fmt(pooled(inside, "ns", k)), fmt(pooled(outside, "ns", k))] for k, title in CALLS])

    bt = out["batches"]
    rows = []
    for k, title in SOURCES:
        us = pooled(bt, "per_batch_us", k)
        plain = "list" if k in ("list", "even_list") else "generator"  # the reference: paired with none
        extra = "-" if k in (plain, "collective") else fmt(
            [a - p for r in bt for a, p in zip(r["per_batch_us"][k], r["per_batch_us"][plain])], 1, 2)
        rows.append([title, f"{bt[0]['batches'][k]:,}", fmt(us, 1, 2), extra, fmt(pooled(bt, "first_us", k), 1, 0)])
    t3 = md_table(["source", "batches per epoch", "µs per batch: median (min-max)",
                   "added per batch, paired with the plain source", "first batch, µs (the epoch's agreement)"], rows)

    tr = out["train"]
    metrics = {}  # name: {kind: values per round}
    for key, name in TRAIN_METRICS:
        metrics[name] = {k: [r[key] for r in tr[k]] for k in tr}
    changes = {name: paired(m["with"], m["without"]) for name, m in metrics.items()}
    head = ["job"]
    for _, name in TRAIN_METRICS:
        head += [f"{name}, µs per step: median (min-max)", "vs without (paired by round): median (range)"]
    rows = []
    for kind, title in (("without", "without `step()`"), ("with", "`step()` after every step")):
        cells = [title]
        for _, name in TRAIN_METRICS:
            cells.append(fmt(metrics[name][kind]))
            d = changes[name]
            cells.append("-" if kind == "without" else f"{pct(statistics.median(d))} ({pct(d[0])} to {pct(d[-1])})")
        rows.append(cells)
    t4 = md_table(head, rows)

    # What the figures say against the goals.
    v = []
    mo, mt = statistics.median(ours), statistics.median(theirs)
    v.append(bullet(f"""**Planning an epoch** ({plan['size']:,} samples, rank {plan['rank']} of {plan['replicas']}):
        rankrun's sampler {mo * 1e3:.0f} ms, torch's {mt * 1e3:.0f} ms; torch's time was {times(ratio)} rankrun's
        {f"in the {len(ratio)} runs (paired by run)" if len(ratio) > 1 else "in the one run"}. Goal (no slower than
        torch's): {"met in every run" if min(ratio) >= 1 else
        "met at the median, not in every run" if mo <= mt else "not met"}. The orders differ by design
        (rankrun's SplitMix64 shuffle, torch's `randperm`); both give {plan['size'] // plan['replicas']:,} distinct
        indices."""))
    bp = statistics.median(b["plan"])
    v.append(bullet(f"""**BucketSampler** over {buckets['size']:,} lengths (no torch peer, no goal): the plan takes
        {bp * 1e3:.0f} ms, {bp / mo:.1f}x the DistributedSampler's whole epoch above, and reading the epoch's
        {buckets['batches']:,} batches {statistics.median(b['iterate']) * 1e3:.0f} ms more. The plan builds every
        rank's batches of the epoch (the rounds of all {plan['replicas']} ranks) before it
        keeps this rank's."""))
    step_in = pooled(inside, "ns", "step")
    beat_in = pooled(inside, "ns", "heartbeat")
    worst = max(step_in + beat_in)
    goal2 = ("met in every round" if worst < 5000 else
             "met at the median, not in every round" if max(statistics.median(step_in), statistics.median(beat_in)) < 5000
             else "not met")
    beats = sum(r["beats"] for r in inside)
    interval = info.get("interval_ms")
    v.append(bullet(f"""**`step()` inside a rankrun worker**: {statistics.median(step_in):.0f} ns a call
        ({min(step_in):.0f}-{max(step_in):.0f}), `heartbeat()` {statistics.median(beat_in):.0f} ns, each rank timing
        {args.calls:,} calls per round while the other rank did the same on the other core; the heartbeat thread
        wrote {beats:.0f} beats to the store during the timed loops (both ranks,
        {sum(r['seconds'] for r in inside) / len(inside):.0f} s each, interval
        {f"{int(interval) / 1000:g} s" if interval else "the runtime's default"}). Goal (under 5 µs): {goal2}.
        Outside rankrun, where it is a no-op, `step()` costs {statistics.median(pooled(outside, 'ns', 'step')):.0f} ns{
        f" (more than inside: that process ran at another moment of this shared machine, and `os.getpid()` alone "
        f"took {statistics.median(pooled(outside, 'ns', 'getpid')):.0f} ns there)"
        if statistics.median(pooled(outside, 'ns', 'step')) > statistics.median(step_in) else ""}.
        Most of a call is Python's; in the fastest rounds (the least disturbed by other work) `step()` took
        {min(step_in):.0f} ns, of which a ctypes call into librankrun_worker
        {min(pooled(inside, 'ns', 'ctypes')):.0f} ns (an empty Python function
        {min(pooled(inside, 'ns', 'nothing')):.0f} ns; a system call such as `os.getpid()`, which a call does not
        make, {min(pooled(inside, 'ns', 'getpid')):.0f} ns on this machine); the runtime's own work in a call is an
        atomic store."""))
    el = [a - p for r in bt for a, p in zip(r["per_batch_us"]["even_list"], r["per_batch_us"]["list"])]
    eg = pooled(bt, "per_batch_us", "even_generator")
    ag = pooled(bt, "per_batch_us", "collective")
    if max(eg) * 10 < min(ag):
        collective = ("far less than one collective, so the batches of this build were not each agreed on by a "
                      "collective as its documentation says")
    elif max(min(ag), min(eg)) <= min(max(ag), max(eg)):
        collective = ("the two ranges overlap: a batch costs about what the collective does, and even_batches' own "
                      "Python around it is within this machine's noise")
    elif max(ag) < min(eg):
        collective = (f"the collective itself is {statistics.median(ag) / statistics.median(eg) * 100:.0f}% of it, "
                      "the rest even_batches' own Python around it")
    else:
        collective = ("the bare collective was the slower here, though even_batches makes the same one and more "
                      "work around it: the collective's latency on these shared cores varies by more than that work")
    v.append(bullet(f"""**even_batches** (2 ranks, gloo; no goal set): over a source with a len() it adds
        {statistics.median(el):.2f} µs per batch: each batch passes rankrun.data's count to the heartbeat (one
        ctypes call, as in part 2), and the epoch's one all_gather waits in its first
        batch ({statistics.median(pooled(bt, 'first_us', 'even_list')):.0f} µs). Over a generator each batch
        waits for one all_reduce of one number across the ranks: {statistics.median(eg):.0f} µs per batch
        ({min(eg):.0f}-{max(eg):.0f}), against {statistics.median(ag):.0f} µs ({min(ag):.0f}-{max(ag):.0f}) for a
        bare `dist.all_reduce` of one int64 in the same job: {collective}. A source with a len() is the cheap
        path; a generator's batches pay a collective each."""))
    wall = metrics["whole loop"]
    direct = statistics.median(step_in) / 1e3 / statistics.median(wall["without"])
    said = ", ".join(f"{pct(statistics.median(d))} ± {noise(d) * 100:.1f}% ({name})" for name, d in changes.items())
    seen = [name for name, d in changes.items() if beyond_noise(d)]
    rounds = len(changes["whole loop"])
    if rounds < 5:
        verdict, goal4 = "too few rounds to tell a cost from the noise", "not shown (too few rounds)"
    elif seen:
        verdict = ("beyond the noise in " + ", ".join(seen)
                   + " (every round slower than its pair, by more than the scatter)")
        goal4 = "not met"
    else:
        verdict, goal4 = "no change beyond the noise", "met"
    least = min(noise(d) for d in changes.values())
    beats = statistics.median(r["beats"] for r in tr["with"])
    v.append(bullet(f"""**A DDP loop with `step()` after every step** against the same loop without: {said};
        over {rounds} paired round{"" if rounds == 1 else "s"}, {verdict}. Goal (no slower, within the noise): {goal4}{
        f"; but this run's noise (± {least * 100:.1f}% at the least) is far above what the calls cost, so the "
        "timings only rule out a large cost" if goal4 == "met" and least > 0.02 else ""}. A call's own cost ({statistics.median(step_in):.0f} ns, part 2)
        is {direct * 100:.3f}% of a {statistics.median(wall['without']) / 1e3:.1f} ms step. Its heartbeat thread
        wrote {beats:.0f} beat{"" if beats == 1 else "s"} per rank to the store during a timed loop of
        {statistics.median(wall['with']) * args.steps / 1e6:.1f} s (median; at most one per interval, and only
        after calls)."""))
    return {"tables": (t1, t1b, t2, t3, t4), "verdicts": v}


def describe_code(info):
    c0, c1 = info["code0"], info["code1"]
    words = f"commit {c0['head']}"
    if c1.get("head") != c0["head"]:
        words += f" (HEAD moved to {c1.get('head')} during the run)"
    if c0["measured"]:
        words += ", with uncommitted changes to " + ", ".join(f"`{p}`" for p in c0["measured"])
    else:
        words += ", no uncommitted changes to `packaging/python/rankrun/` or `worker_runtime/`"
    if c0["other"]:
        words += f" (uncommitted changes to {c0['other']} other files of the tree)"
    if info.get("rebuilt"):
        words += "; rankrun was rebuilt during the run (its jobs did not all run the same build)"
    if info["tree_sha1"] != info["tree_sha0"]:
        words += "; the package in the tree changed during the run"
    shas = info["worker_shas"]
    if len(shas) > 1:
        words += "; the workers did not all run the same package"
    elif shas and shas[0] == info["tree_sha0"]:
        words += "; the workers ran the tree's `rankrun` package (built into rankrun)"
    elif shas:
        words += "; the workers ran a `rankrun` package (built into rankrun) that differs from the tree's"
    return words


def machine(info):
    return (f"{info['cpus']} CPUs, {info['uname']}, Python {info['python']}, torch {info['torch']}, "
            f"{info['threads']} intra-op thread per worker")


def section(out, rep, args, command):
    info = out["info"]
    t1, t1b, t2, t3, t4 = rep["tables"]
    plan, buckets = out["plan"], out["buckets"]
    intro = para("""What `rankrun.data` and `rankrun.progress` cost a training script, against torch's own
        code where torch has it, in the same run. Their samplers' plans are the C++ worker runtime's,
        computed by `librankrun_worker` through ctypes; `step()` and `heartbeat()` hand the step to the
        runtime's heartbeat thread, which writes it to rankrun's store. Goals: an epoch's plan no slower than
        torch's `DistributedSampler`; `step()` under 5 µs a call inside a rankrun worker; a training loop
        that calls `step()` every step no slower, within the noise, than one that does not.""")
    m1 = para(f"""**1.** One process of `/usr/bin/python3` with the tree's `packaging/python` and the build's
        `librankrun_worker` (`RANKRUN_WORKER_LIBRARY`). Each run builds the sampler for rank {plan['rank']} of
        {plan['replicas']} (shuffle, seed 0), calls `set_epoch(1)` and makes the list of its indices, all inside the
        timing: rankrun's `DistributedSampler({plan['size']:,})` against torch's
        `DistributedSampler(range({plan['size']:,}))`, the first of the pair alternating from run to run;
        {len(plan['seconds']['rankrun'])} runs each, after one untimed small run of each (the library loaded).
        `BucketSampler` has no torch peer: {buckets['size']:,} lengths drawn uniformly from 1-511, boundaries
        {buckets['boundaries']}, batch sizes {buckets['batch_sizes']}, the same rank {plan['rank']} of {plan['replicas']};
        {len(buckets['seconds']['plan'])} runs.""")
    m2 = para(f"""**2.** Inside one `rankrun --nproc-per-node 2` job (its store, and the heartbeat thread of
        each worker, made by one untimed `step()` first), each rank times loops of {args.calls:,} calls
        (`for _ in range(n): f()`), {args.call_rounds} rounds of each call, their order rotating; both ranks
        at once, one per core. The same script run by `/usr/bin/python3` without rankrun (no `MASTER_ADDR`: no
        store, every call only counts) gives the last column. The references show what the loop and Python's
        call cost alone.""")
    m3 = para(f"""**3.** The same job, after `init_process_group("gloo")`: each rank iterates, one epoch at a
        time, a list of {args.known_batches:,} batches and a generator of {args.gen_batches:,} (a new one each
        epoch, no `len()`), plainly and through `even_batches` (one `EvenBatches` per source, iterated once per
        epoch), after a barrier; and, for reference, {args.gen_batches:,} bare `dist.all_reduce` calls of one
        int64 in the same loop. One untimed epoch of each, then {args.batch_rounds} rounds, the order rotating.
        "Added per batch" pairs each epoch with the plain epoch of its round. The first batch's time holds the
        agreement on the epoch's counts (one all_gather) where there is one.""")
    m4 = para(f"""**4.** One `rankrun --nproc-per-node 2` job per kind and round: DDP over gloo, 3 x
        `Linear(256, 256)` with ReLUs between, batch 32, MSE loss, SGD; {args.warmup} steps of warm-up, then
        {args.steps} steps timed with `time.perf_counter` between a barrier and the end (the mean over the ranks,
        which run in lockstep), each window of about {args.window:g} s on rank 0 (the fastest is the one least
        disturbed by other work; both kinds of job read the clock at every step) and each rank's process CPU
        time (all its threads, mean over the ranks). The two kinds alternate which runs first,
        {args.ddp_rounds} rounds; "vs without" pairs each job with the other kind's of its round: the median of
        those changes and their range. Below, "± x%" is half that range (at least 1.5%), and a change counts
        as beyond the noise when every round is slower than its pair and the change is larger than that.""")
    results = para(f"""Results of {info['date']}: {machine(info)}; the runs share the {info['cpus']} cores
        with other work (load average {info['load0']:.1f} at the start, {info['load1']:.1f} at the end);
        {describe_code(info)}.""")
    return f"""{SECTION}

{intro}

Command (about {max(1, round(info["minutes"]))} minute{"" if max(1, round(info["minutes"])) == 1 else "s"} on the machine below; `make bench` runs it, `make test`
runs it with `--tiny`):

```
{command}
```

{m1}

{m2}

{m3}

{m4}

{results}

### 1. Planning one epoch of {plan['size']:,} samples

{t1}

{t1b}

### 2. The cost of a call of `rankrun.progress`

{t2}

### 3. `even_batches` per batch, 2 ranks over gloo

{t3}

### 4. A DDP training loop with and without `step()`

{t4}

What it means:

{chr(10).join(rep['verdicts'])}
"""


def write_section(path, text):
    """Replaces SECTION of the document (up to the next "## "), or appends it."""
    doc = Path(path).read_text()
    start = doc.find(SECTION + "\n")
    if start < 0:
        doc = doc.rstrip("\n") + "\n\n" + text
    else:
        nxt = re.search(r"^## ", doc[start + len(SECTION):], re.M)
        end = start + len(SECTION) + nxt.start() if nxt else len(doc)
        doc = doc[:start] + text + ("\n" if nxt else "") + doc[end:]
    Path(path).write_text(doc)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", default=str(ROOT / "build"))
    ap.add_argument("--plan-size", type=int, default=10_000_000, help="samples of the epoch planned in part 1")
    ap.add_argument("--plan-runs", type=int, default=5, help="runs of each DistributedSampler")
    ap.add_argument("--bucket-size", type=int, default=10_000_000, help="lengths of the BucketSampler")
    ap.add_argument("--bucket-runs", type=int, default=3)
    ap.add_argument("--calls", type=int, default=1_000_000, help="calls per timed loop of part 2")
    ap.add_argument("--call-rounds", type=int, default=3)
    ap.add_argument("--known-batches", type=int, default=20_000, help="batches of the list of part 3")
    ap.add_argument("--gen-batches", type=int, default=1_000, help="batches of the generator of part 3")
    ap.add_argument("--batch-rounds", type=int, default=7)
    ap.add_argument("--ddp-rounds", type=int, default=7, help="rounds of part 4, each a job of either kind")
    ap.add_argument("--steps", type=int, default=400, help="timed DDP steps per job")
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--window", type=float, default=0.5,
                    help="rank 0 of part 4 also times windows of this many seconds; the table gives the fastest")
    ap.add_argument("--job-timeout", type=float, default=300)
    ap.add_argument("--tiny", action="store_true", help="every part at a size of seconds (a check, not figures)")
    ap.add_argument("--json-out", help="also write the run's results to this file")
    ap.add_argument("--write", action="store_true", help=f"update '{SECTION[3:]}' in docs/benchmarks/python-runtime.md")
    ap.add_argument("--docs", default=str(ROOT / "docs" / "benchmarks" / "python-runtime.md"))
    args = ap.parse_args()
    if args.tiny:
        if args.write:
            raise SystemExit("--tiny checks that the benchmark works; its figures are not for the docs (drop --write)")
        args.plan_size, args.plan_runs, args.bucket_size, args.bucket_runs = 100_000, 1, 100_000, 1
        args.calls, args.call_rounds, args.known_batches, args.gen_batches, args.batch_rounds = 10_000, 1, 200, 20, 1
        args.ddp_rounds, args.steps, args.warmup = 1, 5, 2
    out = run_all(args)
    rep = report(out, args)
    argv, skip = [], False
    for a in sys.argv[1:]:
        if skip:
            skip = False
        elif a in ("--json-out", "--docs"):
            skip = True
        elif not a.startswith(("--json-out=", "--docs=")):
            argv.append(a)
    command = " ".join(["/usr/bin/python3 bench/python_runtime_bench.py"] + argv)
    info = out["info"]
    print(f"machine: {machine(info)}; load average {info['load0']:.2f} -> {info['load1']:.2f}; "
          f"{info['minutes']:.1f} min; {describe_code(info)}")
    titles = ("1. Planning one epoch", "1. BucketSampler", "2. Calls of rankrun.progress",
              "3. even_batches, 2 ranks over gloo", "4. DDP loop with and without step()")
    for title, tab in zip(titles, rep["tables"]):
        print(f"\n{title}\n\n{tab}")
    print("\n" + "\n".join(rep["verdicts"]))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"command": command, "results": out}, indent=1))
    if args.write:
        write_section(args.docs, section(out, rep, args, command))
        log(f"wrote '{SECTION[3:]}' in {args.docs}")


if __name__ == "__main__":
    main()
