#!/usr/bin/python3
"""Cost of the in-worker sampler; docs/benchmarks/sampler.md, section "Sampler cost inside a worker" (and,
with --torch-root, "Sampler and flight recorder cost inside a worker (torch X.Y)").

    /usr/bin/python3 bench/sampler_bench.py [--build-dir build] [--runs 7] [--write]
    /usr/bin/python3 bench/sampler_bench.py --torch-root sid [--write]

rankrun's sitecustomize.py (launcher/hangs/python/) starts a daemon thread in every worker once
torch.distributed is imported; once per RANKRUN_SAMPLE_INTERVAL seconds (default 1, 0: off) it
reads the main thread's frames and CPU clock and rewrites <pid>.where. This measures what that
costs the worker's own work, under `rankrun --nproc-per-node 2` (gloo, CPU), in one job per
sampler setting and round, each job running two workloads in turn:

  (1) allreduce: a loop of dist.all_reduce on a tensor of 16 floats;
  (2) ddp: a DDP training step, MLP of 3 x Linear(256, 256), batch 32, SGD.

Each workload is warmed up, then timed with time.perf_counter between two barriers; the time
per iteration is the mean over ranks (they run in lockstep), which rank 0 prints as one
`SAMPLERBENCH {json}` line. Each rank also reads its sampler thread's CPU clock
(pthread_getcpuclockid) and sample count before and after, so the sampler's own CPU per sample
comes out directly, below the noise of the timings. Rank 0 also times windows of about --window
seconds (the fastest window is the least disturbed by other work), and each rank's process CPU
time per iteration is recorded: both are meant to be less disturbed by other work than the whole
loop's wall time.

Settings: off (RANKRUN_SAMPLE_INTERVAL=0), default (variable unset: 1 s), and a harsher 0.01 s,
to show that the cost scales with the rate. rankrun passes its environment to the workers, so
the variable is set in rankrun's. The settings alternate within each round and their order
rotates from round to round, so drift on a shared machine hits each alike. The tables give the
median over rounds and the range, and the change against off paired round by round (each run
against the off run of its own round): the median change and the range of the changes.
--write replaces (or appends) that section of docs/benchmarks/sampler.md; --json-out saves the run, and
--from-json reports a saved run again without running anything. About 6 minutes with the defaults
on 2 cores.

--torch-root SUITE runs the workers with the torch of a Debian root made by tools/torch-root.sh
SUITE (sid: torch 2.14): rankrun's PYTHON_EXEC is tests/helpers/torch-python with
RANKRUN_TORCH_ROOT set to that root, as in the tests. With a torch that has the generic flight
recorder (torch 2.8 and later), rankrun also turns the recorder on (RANKRUN_FLIGHT_RECORDER
entries, default 2000: sitecustomize.py sets TORCH_FR_BUFFER_SIZE unless the user did), and each
sample also reads every process group's progress from it (the status only: microseconds) plus,
for a collective still pending a sample later, one full read of its entries. torch 2.14 records collectives
even without the variable; TORCH_FR_BUFFER_SIZE=0 turns its recorder off. So the settings then
cover the recorder too:

  off      RANKRUN_SAMPLE_INTERVAL=0 and TORCH_FR_BUFFER_SIZE=0: neither rankrun's sampler nor
           torch's recorder;
  default  neither variable set (nor RANKRUN_FLIGHT_RECORDER): rankrun's defaults, the sampler at
           1 s and the recorder at 2000 entries;
  0.01     RANKRUN_SAMPLE_INTERVAL=0.01, the recorder on as at the default.

"vs off" then holds the recorder's own cost (recording each collective) as well as the sampler's.
Each rank also counts the sampler's reads of the recorder (a counting wrapper around the
sampler's one call into torch: a Python call more per read), so the reads of whole entries per
sample come out beside the sampler thread's CPU per sample. Each job checks in the workers that
the recorder is off or on as the setting says. --write then writes the section "Sampler and
flight recorder cost inside a worker (torch X.Y)" (X.Y: the version the workers ran), right after
the section of the machine's torch, which it leaves as it is.
"""
import argparse
import datetime
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

from benchlib import log

ROOT = Path(__file__).resolve().parents[1]
PY = "/usr/bin/python3"
TAG = "SAMPLERBENCH "
SECTION = "## Sampler cost inside a worker"
RECORDER_SECTION = "## Sampler and flight recorder cost inside a worker (torch {version})"
OTHER_TORCH_SECTION = "## Sampler cost inside a worker (torch {version})"

WORKER = r'''
import hashlib, json, os, sys, threading, time
import torch
import torch.distributed as dist
from torch import nn

allreduce_iters, ddp_steps, window = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
dist.init_process_group("gloo")
rank = dist.get_rank()
site = sys.modules.get("sitecustomize")
# The sampler lives in _rankrun_watch.py, which rankrun's sitecustomize.py loads with
# torch.distributed.
sampler = getattr(sys.modules.get("_rankrun_watch"), "_rankrun_sampler", None)
thread = next((t for t in threading.enumerate() if t.name == "rankrun-sampler"), None)
clock = time.pthread_getcpuclockid(thread.ident) if thread is not None else None
try:
    text = b""
    for name in ("sitecustomize.py", "_rankrun_watch.py"):
        with open(os.path.join(os.path.dirname(site.__file__), name), "rb") as f:
            text += f.read()
    site_sha = hashlib.sha1(text).hexdigest()
except Exception:
    site_sha = None

# torch's generic flight recorder (torch 2.8 and later): whether this torch has it, and the
# sampler's reads of it, counted: [status reads, reads of the entries].
try:
    import torch._C._distributed_c10d as c10d
except Exception:
    c10d = None
fr_dump = getattr(c10d, "_dump_fr_trace_json", None)
flight = getattr(sampler, "flight", None)
fr_reads = [0, 0]
if flight is not None:
    fr_call = flight.call

    def counted_call(fn, collectives, only_active):
        fr_reads[1 if collectives else 0] += 1
        return fr_call(fn, collectives, only_active)

    flight.call = counted_call


def fr_groups():
    """The process groups the recorder has a status for (none while it is off)."""
    if fr_dump is None:
        return -1
    try:
        return len(json.loads(fr_dump(includeCollectives=False, onlyActive=True)).get("pg_status") or {})
    except Exception:
        return -1


def fr_read():
    """One read of the recorder's entries as the sampler makes it while a collective is pending
    (after the timed loop): entries, bytes of JSON, the time of torch's dump and of the parse, and
    the entries' states."""
    t0 = time.perf_counter()
    text = fr_call(fr_dump, True, True)
    t1 = time.perf_counter()
    entries = json.loads(text).get("entries") or []
    t2 = time.perf_counter()
    return {"fr_entries": len(entries), "fr_bytes": len(text), "fr_dump_ms": (t1 - t0) * 1e3,
            "fr_parse_ms": (t2 - t1) * 1e3, "fr_states": sorted({str(e.get("state")) for e in entries})}


def sampler_state():
    if sampler is None or clock is None:
        return 0, 0.0, 0
    return sampler.seq, time.clock_gettime(clock), fr_reads[1]


def timed(name, fn, warmup, n):
    for _ in range(warmup):
        fn()
    dist.barrier()
    clock = time.perf_counter
    windows = []  # time per iteration in each window of about `window` seconds
    seq0, scpu0, full0 = sampler_state()
    cpu0, t0 = time.process_time(), clock()
    w_start, w_iters = t0, 0
    for _ in range(n):
        fn()
        w_iters += 1
        now = clock()
        if now - w_start >= window:
            windows.append((now - w_start) / w_iters)
            w_start, w_iters = now, 0
    t1, cpu1 = clock(), time.process_time()
    seq1, scpu1, full1 = sampler_state()
    if not windows:  # a loop shorter than one window
        windows.append((t1 - t0) / n)
    totals = torch.tensor([t1 - t0, cpu1 - cpu0, seq1 - seq0, scpu1 - scpu0, full1 - full0], dtype=torch.float64)
    dist.all_reduce(totals)
    world = dist.get_world_size()
    wall, cpu, samples, sampler_cpu, full_reads = (x / world for x in totals.tolist())  # per rank
    if rank == 0:
        recorder = {}
        if fr_dump is not None:
            recorder = {"fr_groups": fr_groups(), "fr_buffer": os.environ.get("TORCH_FR_BUFFER_SIZE"),
                        "fr_sampler": flight is not None, "fr_full_reads": full_reads}
            if flight is not None and recorder["fr_groups"] > 0:
                recorder.update(fr_read())
        print("SAMPLERBENCH " + json.dumps({
            "workload": name, "iters": n, "wall_s": wall, "per_iter_us": wall / n * 1e6,
            "window_us": [w * 1e6 for w in windows],
            "cpu_per_iter_us": cpu / n * 1e6, "samples": samples, "sampler_cpu_s": sampler_cpu,
            "interval": sampler.interval if sampler is not None else 0.0,
            "env": os.environ.get("RANKRUN_SAMPLE_INTERVAL"), "torch": torch.__version__,
            "python": sys.version.split()[0], "threads": torch.get_num_threads(), "site_sha": site_sha,
            **recorder}), flush=True)


small = torch.ones(16)
timed("allreduce", lambda: dist.all_reduce(small), max(1, allreduce_iters // 20), allreduce_iters)

torch.manual_seed(0)
model = nn.parallel.DistributedDataParallel(nn.Sequential(
    nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 256)))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(32, 256), torch.randn(32, 256)


def step():
    opt.zero_grad(set_to_none=True)
    nn.functional.mse_loss(model(x), y).backward()
    opt.step()


timed("ddp", step, max(1, ddp_steps // 20), ddp_steps)
del model, opt  # DDP's reducer holds the process group: let it go while the interpreter is whole
dist.destroy_process_group()
'''

WORKLOADS = {
    "allreduce": "all_reduce, 16 floats",
    "ddp": "DDP step, 3 x Linear(256, 256), batch 32, SGD",
}


def parse_config(token):
    """'off' -> '0', 'default' -> None (variable unset), else the interval as given."""
    token = token.strip()
    if token == "off":
        return "0"
    if token == "default":
        return None
    float(token)
    return token


def label(value):
    if value is None:
        return "1 s (default)"
    if float(value) == 0:
        return "off"
    return f"{value} s"


def run_job(rankrun, worker, value, args, env, tmp, recorder=False):
    """One job at sampler setting `value`; with `recorder` (a torch with the generic flight
    recorder), off also turns torch's recorder off, and the other settings leave it at rankrun's
    default."""
    env = dict(env)
    if value is None:
        env.pop("RANKRUN_SAMPLE_INTERVAL", None)
    else:
        env["RANKRUN_SAMPLE_INTERVAL"] = value
    off = value is not None and float(value) == 0
    if recorder:
        for name in ("TORCH_FR_BUFFER_SIZE", "RANKRUN_FLIGHT_RECORDER"):
            env.pop(name, None)
        if off:
            env["TORCH_FR_BUFFER_SIZE"] = "0"
    cmd = [rankrun, "--nproc-per-node", str(args.nproc), worker, str(args.allreduce_iters), str(args.ddp_steps),
           str(args.window)]
    proc = subprocess.run(cmd, env=env, cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=args.job_timeout)
    results = {}
    for line in proc.stdout.splitlines():
        at = line.find(TAG)
        if at >= 0:
            r = json.loads(line[at + len(TAG):])
            results[r["workload"]] = r
    if proc.returncode != 0 or set(results) != set(WORKLOADS):
        sys.stderr.write(proc.stdout[-4000:])
        raise SystemExit(f"rankrun exited {proc.returncode} with {sorted(results)} for RANKRUN_SAMPLE_INTERVAL={value}")
    want = 0.0 if off else float(value or 1)
    for r in results.values():
        if abs(r["interval"] - want) > 1e-9:
            raise SystemExit(f"the workers' sampler ran at {r['interval']} s, not {want} s")
        if recorder:
            on = r.get("fr_groups", -1) > 0
            if on == off or (not off and not r.get("fr_sampler")):
                raise SystemExit(f"RANKRUN_SAMPLE_INTERVAL={value}: torch's flight recorder is "
                                 f"{'on' if on else 'off'} in the workers (TORCH_FR_BUFFER_SIZE={r.get('fr_buffer')}, "
                                 f"{r.get('fr_groups')} groups), the sampler {'reads' if r.get('fr_sampler') else 'does not read'} it")
    return results


def pct(x, digits=1):
    return f"{x * 100:+.{digits}f}%"


# What is compared between settings, each one value per run: (key, column title, value of a run).
METRICS = (
    ("loop", "whole loop, µs per iteration", lambda r: r["per_iter_us"]),
    ("best", "fastest window, µs per iteration", lambda r: min(r["window_us"])),
    ("cpu", "process CPU, µs per iteration", lambda r: r["cpu_per_iter_us"]),
)
METRIC_NAMES = {"loop": "whole loop", "best": "fastest window", "cpu": "process CPU"}


def summarize(samples, configs):
    """samples[cfg][workload]: one result per round, rounds in the same order for every cfg."""
    off = configs[0]
    rows = []
    for w in WORKLOADS:
        for cfg in configs:
            rs = samples[cfg][w]
            row = {"workload": w, "cfg": cfg}
            for key, _, value in METRICS:
                v = [value(r) for r in rs]
                m = {"values": v, "median": statistics.median(v)}
                m["spread"] = (max(v) - min(v)) / m["median"]
                if cfg != off:
                    base = [value(r) for r in samples[off][w]]
                    m["paired"] = sorted(a / b - 1 for a, b in zip(v, base))
                row[key] = m
            if cfg != off:
                per_sample = [r["sampler_cpu_s"] / r["samples"] * 1e6 for r in rs if r["samples"] > 0]
                row["rate"] = statistics.median(r["samples"] / r["wall_s"] for r in rs)
                row["per_sample_us"] = statistics.median(per_sample) if per_sample else None
                row["sampler_share"] = statistics.median(r["sampler_cpu_s"] / r["wall_s"] for r in rs)
                row["of_process"] = statistics.median(r["sampler_cpu_s"] / (r["cpu_per_iter_us"] * r["iters"] / 1e6)
                                                      for r in rs)
                full = [r for r in rs if "fr_full_reads" in r]
                taken = sum(r["samples"] for r in full)
                # all runs together: the reads are rare, and a median of them would hide them
                row["full_reads"] = sum(r["fr_full_reads"] for r in full) / taken if full and taken else None
                read = [r for r in rs if "fr_entries" in r]
                if read:
                    row["fr_read"] = {k: statistics.median(r[k] for r in read)
                                      for k in ("fr_entries", "fr_bytes", "fr_dump_ms", "fr_parse_ms")}
                    row["fr_read"]["fr_states"] = sorted({x for r in read for x in r["fr_states"]})
            rows.append(row)
    return rows


def tables(rows, configs, runs, window, recorder=False):
    off = configs[0]
    head = "| workload | sampler |"
    for _, title, _ in METRICS:
        head += f" {title.replace('window', f'{window:g} s window')}: median (min-max) | vs off |"
    timing = [head, "|---|---|" + "---|---|" * len(METRICS)]
    own = ["| workload | sampler | samples/s per rank | sampler CPU per sample, µs | sampler CPU, % of a core | "
           "sampler CPU, % of the process's CPU |"
           + (" reads of the recorder's entries per sample (all runs together) |" if recorder else ""),
           "|---|---|---|---|---|---|" + ("---|" if recorder else "")]
    for r in rows:
        cells = [WORKLOADS[r["workload"]], label(r["cfg"])]
        for key, _, _ in METRICS:
            m = r[key]
            cells.append(f"{m['median']:.0f} ({min(m['values']):.0f}-{max(m['values']):.0f})")
            if r["cfg"] == off:
                cells.append(f"(spread {m['spread'] * 100:.1f}%)")
            else:
                p = m["paired"]
                cells.append(f"{pct(change(m))} ({pct(p[0])} to {pct(p[-1])})")
        timing.append("| " + " | ".join(cells) + " |")
        if r["cfg"] != off:
            per_sample = "-" if r["per_sample_us"] is None else f"{r['per_sample_us']:.0f}"
            cells = [WORKLOADS[r["workload"]], label(r["cfg"]), f"{r['rate']:.2f}", per_sample,
                     f"{r['sampler_share'] * 100:.3f}", f"{r['of_process'] * 100:.3f}"]
            if recorder:
                cells.append("-" if r["full_reads"] is None else f"{r['full_reads']:.3f}")
            own.append("| " + " | ".join(cells) + " |")
    return "\n".join(timing), "\n".join(own)


def change(m):
    """The change against off: the median of the changes paired by round."""
    return statistics.median(m["paired"])


def noise(m):
    """How far single rounds scatter around that change: half the range of the paired changes,
    and never less than 1.5% (on 2 shared cores, smaller differences come and go from run to run)."""
    return max(0.015, (m["paired"][-1] - m["paired"][0]) / 2)


def beyond_noise(m):
    """Every round slower than its own off run, and the change larger than the scatter."""
    return m["paired"][0] > 0 and change(m) > noise(m)


def upper_bound(m):
    """The change plus the scatter: what the cost could still be, the noise considered."""
    return max(0.0, change(m)) + noise(m)


def bullet(text):
    return textwrap.fill(" ".join(text.split()), width=100, initial_indent="- ", subsequent_indent="  ",
                         break_on_hyphens=False, break_long_words=False)


def reading(rows, configs, recorder=False):
    by = {(r["workload"], r["cfg"]): r for r in rows}
    off = configs[0]
    out = []
    bounds = []
    for w, name in WORKLOADS.items():
        o = by[(w, off)]
        parts = [f"**{name}**: the off runs alone spread over "
                 + ", ".join(f"{o[k]['spread'] * 100:.1f}% ({METRIC_NAMES[k]})" for k, _, _ in METRICS) + "."]
        for cfg in configs[1:]:
            r = by[(w, cfg)]
            seen = [k for k, _, _ in METRICS if beyond_noise(r[k])]
            said = ", ".join(f"{pct(change(r[k]))} ± {noise(r[k]) * 100:.1f}% ({METRIC_NAMES[k]})"
                             for k, _, _ in METRICS)
            if len(r[METRICS[0][0]]["paired"]) < 5:
                verdict = "too few rounds to tell a cost from the noise"
            elif seen:
                verdict = ("beyond the noise in " + ", ".join(METRIC_NAMES[k] for k in seen)
                           + " (every round slower than its own off run, by more than the scatter)")
            else:
                verdict = "no cost beyond the noise"
            parts.append(f"{'Sampler and recorder' if recorder else 'Sampler'} at {label(cfg)}: {said}; {verdict}.")
            if cfg is not None and float(cfg) < 1:
                # The cost per sample is about fixed: the default's is this setting's divided by the
                # ratio of their sample rates (measured where the default ran, else nominal).
                d = by.get((w, None))
                if d is not None and d["rate"] > 0:
                    k, how = r["rate"] / d["rate"], "the ratio of their samples per second"
                else:
                    k, how = 1 / float(cfg), "the ratio of their intervals"
                scaled = []
                for key, _, _ in METRICS:
                    b = upper_bound(r[key]) / k
                    bounds.append(b)
                    scaled.append(f"{b * 100:.3f}% ({METRIC_NAMES[key]})")
                parts.append(f"Its upper bounds (change plus scatter), divided by {k:.0f} ({how}) for the 1 s "
                             "default: " + ", ".join(scaled) + ".")
                parts.append(f"The sampler thread's own CPU was {r['of_process'] * 100:.2f}% of the process's at "
                             f"{label(cfg)}: the direct part of the process CPU change.")
        out.append(bullet(" ".join(parts)))
    faster = [f"{WORKLOADS[r['workload']]} at {label(r['cfg'])}, {METRIC_NAMES[k]} {pct(change(r[k]))}"
              for r in rows if r["cfg"] != off for k, _, _ in METRICS if r[k]["paired"][-1] < 0]
    if faster:
        out.append(bullet("Faster than off in every round: " + "; ".join(faster) + f""". The sampler
            {'and the recorder only add' if recorder else 'only adds'} work, so this is the machine's other
            load (or the scheduler), not a saving; the bounds above count such a change as none."""))
    on = [r for r in rows if r["cfg"] != off and r["per_sample_us"] is not None]
    if on:
        per_sample = [r["per_sample_us"] for r in on]
        work = "walking the main thread's frames, two clock reads, one pwrite and one ftruncate"
        if recorder:
            work += (", the recorder's status of every process group and, for a collective still pending a sample "
                     "later, one read of the recorder's entries")
        text = (f"""The sampler's own CPU clock: a sample costs its thread {min(per_sample):.0f}-{max(per_sample):.0f}
            µs (medians per setting and workload: {work}), taken from the worker's cores and, for its Python
            part, under the GIL. At the default 1 s that is at most {max(per_sample) / 1e4:.3f}% of one core per
            worker.""")
        slow = [w for w in WORKLOADS
                if (w, None) in by and by[(w, None)].get("per_sample_us") is not None
                and all(by[(w, c)].get("per_sample_us") is not None
                        and by[(w, None)]["per_sample_us"] > by[(w, c)]["per_sample_us"]
                        for c in configs[1:] if c is not None)
                and any(c is not None for c in configs[1:])]
        faster_cfg = " or ".join(label(c) for c in configs[1:] if c is not None)
        if slow and not recorder:
            text += f""" A sample costs more at 1 s than at {faster_cfg}, most likely because it finds colder
                caches, and the 1 s figure rests on a few samples per loop."""
        elif slow:
            text += (f" A sample costs more at 1 s than at {faster_cfg} for "
                     + " and ".join(WORKLOADS[w] for w in slow)
                     + "; the 1 s figure rests on a few samples per loop.")
        out.append(bullet(text))
    read = [r for r in rows if r["cfg"] != off and r.get("fr_read")]
    if read:
        def span(key, fmt, scale=1.0):
            v = [r["fr_read"][key] * scale for r in read]
            lo, hi = fmt.format(min(v)), fmt.format(max(v))
            return lo if lo == hi else f"{lo}-{hi}"

        states = sorted({x for r in read for x in r["fr_read"]["fr_states"]})
        out.append(bullet(f"""What one read of the recorder's entries costs, timed on rank 0 once after each timed
            loop (the sampler's call, `includeCollectives=True, onlyActive=True`; medians per setting and
            workload): {span("fr_entries", "{:.0f}")} entries, {span("fr_bytes", "{:.0f}", 1e-3)} kB of JSON,
            {span("fr_dump_ms", "{:.0f}")} ms in torch's dump and {span("fr_parse_ms", "{:.0f}")} ms to parse
            it; the entries' states: {", ".join(states) or "none"}. A sample that reads them pays about
            that (one read every second would be about {max(r["fr_read"]["fr_dump_ms"] + r["fr_read"]["fr_parse_ms"]
            for r in read) / 10:.1f}% of a core); how often the samples here did is in the second table."""))
    direct = [(r["of_process"], r["sampler_share"], r["workload"]) for r in rows if r["cfg"] is None]
    # The default's own timings: a change of 1% or more, beyond the noise.
    timed_cost = [(change(r[k]), r["workload"], k) for r in rows if r["cfg"] is None for k, _, _ in METRICS
                  if len(r[k]["paired"]) >= 5 and beyond_noise(r[k]) and change(r[k]) >= 0.01]
    if bounds or direct:
        worst = max(bounds) if bounds else None
        top = max(direct) if direct else None
        if (top is not None and max(top[0], top[1]) >= 0.01) or timed_cost:
            why = []
            if top is not None and max(top[0], top[1]) >= 0.01:
                why.append(f"""at the default the sampler thread's own CPU alone is {top[0] * 100:.2f}% of the
                           process's CPU and {top[1] * 100:.2f}% of a core ({WORKLOADS[top[2]]}; second table)""")
            if timed_cost:
                why.append("the default's own timings show a cost beyond the noise: " + ", ".join(
                    f"{WORKLOADS[w]} {pct(c)} ({METRIC_NAMES[k]})" for c, w, k in sorted(timed_cost, reverse=True)))
            goal = "Goal (under 1% at the default): not met; " + "; ".join(why) + "."
        elif worst is not None and worst < 0.01:
            far = "far below" if top is None or top[0] * 10 < worst else "below"
            goal = (f"""Goal (under 1% at the default): met. The largest of the bounds above, scaled from the
                    harsher setting, is {worst * 100:.2f}%; the sampler's direct CPU at 1 s is {far} it.""")
        elif worst is not None:
            goal = (f"""Goal (under 1% at the default): not shown by the timings of this run, whose noise
                    scaled from the harsher setting still allows {worst * 100:.2f}%; the sampler's direct CPU at
                    1 s (second table) is under 1%.""")
        else:
            goal = (f"""Goal (under 1% at the default): the sampler's direct CPU at 1 s (second table) is under
                    1%; no harsher setting was run to bound the rest.""")
        out.append(bullet(goal))
    return "\n".join(out)


def machine(first, suite=None):
    u = os.uname()
    where = "" if not suite else f" in the workers (from the {suite} root)"
    return (f"{os.cpu_count()} CPUs, {u.sysname} {u.release}, Python {first['python']}, torch {first['torch']}{where}, "
            f"{first['threads']} intra-op thread per worker")


# rankrun's hook in the workers: the files sampler runs are fingerprinted together.
HOOK_FILES = ("launcher/hangs/python/sitecustomize.py", "launcher/hangs/python/_rankrun_watch.py")


def git(*args):
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)


def git_state():
    """HEAD, sitecustomize.py at HEAD and in the working tree (sha1 of the text), and the other
    files with uncommitted changes."""
    try:
        import hashlib

        head = git("rev-parse", "--short", "HEAD").stdout.strip()
        at_head, tree = b"", b""
        for name in HOOK_FILES:
            at_head += subprocess.run(["git", "-C", str(ROOT), "show", f"HEAD:{name}"], capture_output=True).stdout
            try:
                tree += (ROOT / name).read_bytes()
            except OSError:
                pass
        changed = [l[3:] for l in git("status", "--porcelain").stdout.splitlines() if l[3:] not in HOOK_FILES]
        return {"head": head, "site_head": hashlib.sha1(at_head).hexdigest(), "site_tree": hashlib.sha1(tree).hexdigest(),
                "other_changes": len(changed)}
    except OSError:
        return {"head": "?"}


def describe_code(start, end, site_shas, rebuilt=None):
    """What code was measured, in words: the commit, whether sitecustomize.py had uncommitted
    changes, and which sitecustomize.py the workers ran (rankrun builds it in): `start` and `end`
    are git_state() at the start and the end of the run, `site_shas` the workers' sha1s of their
    sitecustomize.py, `rebuilt` whether rankrun's executable changed during the run (None: not known)."""
    head = start.get("head", "?")
    words = f"commit {head}"
    if end.get("head") != head:
        words += f" (HEAD moved to {end.get('head')} during the run)"
    if start.get("site_tree") != start.get("site_head"):
        words += ", with uncommitted changes to `sitecustomize.py`"
    elif end.get("site_tree") != start.get("site_tree"):
        words += ", no uncommitted changes to `sitecustomize.py` at the start (some were made during the run)"
    else:
        words += ", no uncommitted changes to `sitecustomize.py`"
    if start.get("other_changes"):
        words += f", uncommitted changes to {start['other_changes']} other files of the tree"
    if len(site_shas) > 1:
        words += "; the workers did not all run the same `sitecustomize.py`"
    elif site_shas and site_shas[0] == start.get("site_head"):
        words += f"; the workers ran {head}'s `sitecustomize.py` (built into rankrun)"
    elif site_shas and site_shas[0] == start.get("site_tree"):
        words += "; the workers ran the working tree's `sitecustomize.py`, with those changes (built into rankrun)"
    elif site_shas:
        words += "; the workers ran a `sitecustomize.py` (built into rankrun) that is neither that commit's nor the tree's"
    if rebuilt:
        words += "; rankrun's executable was rebuilt during the run"
    return words


def para(text):
    return textwrap.fill(" ".join(text.split()), width=100, break_on_hyphens=False, break_long_words=False)


def section(command, info, tab, read, args, configs):
    recorder = info.get("recorder", False)
    title = info.get("title", SECTION)
    entries = info.get("fr_buffer") or "2000"
    if recorder:
        settings = ", ".join(
            "off (`RANKRUN_SAMPLE_INTERVAL=0` and `TORCH_FR_BUFFER_SIZE=0`: neither rankrun's sampler nor torch's "
            "recorder)" if c == "0" else
            f"the default (neither variable set: the sampler at 1 s, the recorder at {entries} entries)" if c is None else
            f"`RANKRUN_SAMPLE_INTERVAL={c}` (the recorder on as at the default)" for c in configs)
        intro = para(f"""What rankrun's watch inside a worker costs the worker's own work with torch
            {info['torch_short']}, whose generic flight recorder rankrun turns on: the sampler thread that
            rankrun's `sitecustomize.py` starts in every worker (once `torch.distributed` is imported) and
            torch's flight recorder together. With torch 2.x, `sitecustomize.py` sets
            `TORCH_FR_BUFFER_SIZE` to `RANKRUN_FLIGHT_RECORDER` entries (default 2000) unless the user set
            it (`RANKRUN_FLIGHT_RECORDER=0`: rankrun neither sets nor reads the recorder); torch then records
            every collective. Once per `RANKRUN_SAMPLE_INTERVAL` seconds (default 1; `0`: off) the sampler
            reads the main thread's frames and CPU clock, reads every process group's progress from the
            recorder (`_dump_fr_trace_json(includeCollectives=False, onlyActive=True)`) and, for a
            collective still pending a sample later, once per such collective the recorder's entries, and rewrites
            `<pid>.where`. torch {info['torch_short']} records collectives even without the variable;
            `TORCH_FR_BUFFER_SIZE=0` turns its recorder off. Goal: under 1% at the default. The section
            above measures the sampler alone with the machine's torch.""")
        how = f"""The workers ran torch {info['torch_short']} from a Debian root made by
            `tools/torch-root.sh {info['torch_root']}`: rankrun's `PYTHON_EXEC` was
            `tests/helpers/torch-python` with `RANKRUN_TORCH_ROOT` set to that root, as in the tests. """
    else:
        settings = ", ".join("`0` (off)" if c == "0" else "unset (the default, 1 s)" if c is None else f"`{c}`"
                             for c in configs)
        intro = para("""What the sampler thread that rankrun's `sitecustomize.py` starts in every worker (once
            `torch.distributed` is imported) costs the worker's own work. Once per `RANKRUN_SAMPLE_INTERVAL`
            seconds (default 1; `0`: off) it reads the main thread's frames and CPU clock and rewrites
            `<pid>.where`. Goal: under 1% at the default.""")
        how = "" if not info.get("torch_root") else f"""The workers ran torch {info['torch_short']} from a
            Debian root made by `tools/torch-root.sh {info['torch_root']}` (rankrun's `PYTHON_EXEC`:
            `tests/helpers/torch-python` with `RANKRUN_TORCH_ROOT` set to that root). """
    if recorder:
        which = f"""One job per setting and round: {settings}, set in rankrun's environment, which the
            workers inherit; each job checks in the workers that the recorder is off or on as the setting
            says."""
        counted = """Each rank also reads its sampler thread's CPU clock (`pthread_getcpuclockid`), its
            sample count and its reads of the recorder's entries (counted by a wrapper around the sampler's
            one call into torch) around the timed loop: the second table comes from those, not from the
            timings."""
    else:
        which = f"""One job per sampler setting and round, `RANKRUN_SAMPLE_INTERVAL` {settings}, set in
            rankrun's environment, which the workers inherit."""
        counted = """Each rank also reads its sampler thread's CPU clock (`pthread_getcpuclockid`) and
            sample count around the timed loop: the second table comes from those, not from the timings."""
    vs_off = """ Against off, the other settings pay for torch's recorder too (recording each collective),
        not only for the sampler.""" if recorder else ""
    method = para(f"""{how}Each job is `rankrun --nproc-per-node {args.nproc}` (gloo, CPU) running two workloads
        in turn: {args.allreduce_iters} `all_reduce`s of 16 floats, then {args.ddp_steps} DDP training steps
        (3 x `Linear(256, 256)` with ReLUs in between, batch 32, MSE loss, SGD). Each is warmed up (a
        twentieth of its iterations), then timed with `time.perf_counter` between two barriers: the whole
        loop (its time per iteration, the mean over the ranks, which run in lockstep) and, on rank 0, each
        window of about {args.window:g} s, of which the fastest is the one least disturbed by other work
        (at the default each window holds about one sample, at 0.01 s a hundred). The process's CPU time
        per iteration (all its threads, mean over the ranks) is less sensitive to other work than wall
        time, and holds the sampler's CPU and what it makes the other threads do, not the waits it
        causes. {which} The settings alternate within
        a round and their order rotates from round to round, so that drift hits each alike; {args.runs}
        rounds. "vs off" pairs each run with the off run of its own round: the median of those changes
        and, in brackets, their range; below, "± x%" is half that range (at least 1.5%), the scatter
        of single rounds, and a change counts as beyond the noise when every round is slower than its
        off run and the change is larger than the scatter. The off rows give their spread ((max - min)
        / median).{vs_off} {counted}""")
    g = info.get("git")
    code = (describe_code(g["start"], g["end"], g["site_shas"], g.get("rebuilt")) if g
            else info.get("code") or f"rankrun and `sitecustomize.py` of {info['head']}")
    results = para(f"""Results of {info['date']}: {info['machine']}; the two workers and their gloo threads
        share the {os.cpu_count() if 'cpus' not in info else info['cpus']} cores with other users' work (load
        average {info['load0']:.1f} at the start, {info['load1']:.1f} at the end); {code}.""")
    fewer = "" if not info.get("fewer_rounds") else para(info["fewer_rounds"]) + "\n\n"
    quiet = "" if not info.get("quiet_default") else """, far more than the sampler's own CPU at the default
        rate (second table), so at 1 s the timings show only noise"""
    noise = bullet(f"""Noise: on {info.get('cpus', 2)} cores shared with other users' work, runs of one setting
        differ by the spreads above and single rounds by the ranges under "vs off"{quiet}; and differences under about
        1-2% between settings cannot be told from noise even where the spread is smaller. Hence the 0.01 s
        setting: the cost per sample is about fixed, so the default's cost is the 0.01 s cost divided by
        the ratio of their sample rates. The timings bound it that way; the sampler's own CPU clock
        measures its direct part.""")
    return f"""{title}

{intro}

Command (about {max(1, round(info['minutes']))} minutes on the machine below):

```
{command}
```

{fewer}{method}

{results}

Timings:

{tab[0]}

The sampler's own cost (per rank; medians over the runs):

{tab[1]}

What it means:

{read}
{noise}
"""


def write_section(path, text, title=SECTION, after=None):
    """Replaces section `title` of the document; a new one goes right after section `after` (when
    there is one), else at the end."""
    doc = Path(path).read_text()

    def span(head):
        start = doc.find(head + "\n")
        if start < 0:
            return None
        nxt = re.search(r"^## ", doc[start + len(head):], re.M)
        return start, (start + len(head) + nxt.start() if nxt else len(doc)), nxt is not None

    found = span(title)
    if found:
        start, end, more = found
        doc = doc[:start] + text + ("\n" if more else "") + doc[end:]
    elif after and span(after):
        _, end, more = span(after)
        if more:
            doc = doc[:end] + text + "\n" + doc[end:]
        else:
            doc = doc.rstrip("\n") + "\n\n" + text
    else:
        doc = doc.rstrip("\n") + "\n\n" + text
    Path(path).write_text(doc)


def probe_torch(python, env):
    """(torch's version, whether it has the generic flight recorder) of the workers' interpreter."""
    code = ("import torch, torch._C._distributed_c10d as c; "
            "print(torch.__version__, int(hasattr(c, '_dump_fr_trace_json')))")
    proc = subprocess.run([python, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    words = proc.stdout.split()
    if proc.returncode != 0 or len(words) != 2:
        raise SystemExit(f"{python} cannot import torch: {proc.stderr.strip()[-2000:]}")
    return words[0], words[1] == "1"


def torch_root(suite):
    proc = subprocess.run([str(ROOT / "tools" / "torch-root.sh"), suite], capture_output=True, text=True)
    root = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    if proc.returncode != 0 or not root:
        raise SystemExit(f"tools/torch-root.sh {suite} failed: {proc.stderr.strip()[-2000:]}")
    return root


def short_version(version):
    m = re.match(r"(\d+)\.(\d+)", version)
    return f"{m.group(1)}.{m.group(2)}" if m else version


def run_all(args, configs):
    """Every round of every setting; returns samples[cfg][workload] (one result per round) and the
    facts of the run."""
    rankrun = os.path.abspath(args.rankrun or str(Path(args.build_dir) / "launcher" / "rankrun"))
    if not os.access(rankrun, os.X_OK):
        raise SystemExit(f"{rankrun}: not built (make -C {args.build_dir} rankrun)")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHON_EXEC=PY, PYTHONUNBUFFERED="1")
    env["PATH"] = "/usr/bin:" + env.get("PATH", "")
    env.pop("CUDA_VISIBLE_DEVICES", None)
    root = None
    if args.torch_root:
        root = torch_root(args.torch_root)
        env["PYTHON_EXEC"] = str(ROOT / "tests" / "helpers" / "torch-python")
        env["RANKRUN_TORCH_ROOT"] = root
    version, recorder = probe_torch(env["PYTHON_EXEC"], env)
    recorder = recorder and root is not None  # the machine's torch: as before, the sampler alone
    log(f"workers: {env['PYTHON_EXEC']}" + (f" in {root}" if root else "") + f", torch {version}"
        + (", the generic flight recorder: off with the sampler, else at rankrun's default" if recorder else ""))
    tmp = tempfile.mkdtemp(prefix="rankrun-sampler-bench-")
    worker = str(Path(tmp) / "sampler_worker.py")
    Path(worker).write_text(WORKER)
    code0 = git_state()
    built0 = os.stat(rankrun).st_mtime
    load0 = os.getloadavg()[0]
    t_start = time.time()
    log(f"{os.cpu_count()} CPUs, load average {load0:.2f}; {args.runs} rounds of {[label(c) for c in configs]}")
    samples = {c: {w: [] for w in WORKLOADS} for c in configs}
    try:
        for rnd in range(args.runs):
            order = configs[rnd % len(configs):] + configs[:rnd % len(configs)]
            for cfg in order:
                t = time.time()
                res = run_job(rankrun, worker, cfg, args, env, tmp, recorder)
                for w in WORKLOADS:
                    samples[cfg][w].append(res[w])
                log(f"round {rnd + 1} {label(cfg)}: " + ", ".join(
                    f"{w} {res[w]['per_iter_us']:.1f} µs ({res[w]['samples']:.0f} samples"
                    + (f", {res[w]['fr_full_reads']:.0f} entry reads" if recorder else "") + ")" for w in WORKLOADS)
                    + f"; job {time.time() - t:.1f} s")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    first = samples[configs[0]]["allreduce"][0]
    shas = sorted({r.get("site_sha") for c in configs for w in WORKLOADS for r in samples[c][w]} - {None})
    code1 = git_state()
    rebuilt = os.stat(rankrun).st_mtime != built0
    short = short_version(first["torch"])
    if recorder:
        title = RECORDER_SECTION.format(version=short)
    elif root:
        title = OTHER_TORCH_SECTION.format(version=short)
    else:
        title = SECTION
    fr_buffer = next((r.get("fr_buffer") for r in samples[configs[-1]]["allreduce"] if r.get("fr_buffer")), None)
    info = {"date": datetime.date.today().isoformat(), "machine": machine(first, args.torch_root), "cpus": os.cpu_count(),
            "load0": load0, "load1": os.getloadavg()[0], "head": code0.get("head", "?"),
            "git": {"start": code0, "end": code1, "site_shas": shas, "rebuilt": rebuilt},
            "minutes": (time.time() - t_start) / 60, "torch_root": args.torch_root, "torch_short": short,
            "recorder": recorder, "fr_buffer": fr_buffer, "title": title}
    if args.runs < 7:
        info["fewer_rounds"] = (f"{args.runs} rounds instead of the default 7, to keep the run short: the "
                                "ranges and the scatter below rest on fewer rounds.")
    return samples, info


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", default=str(ROOT / "build"))
    ap.add_argument("--rankrun", help="the rankrun binary (default: BUILD_DIR/launcher/rankrun)")
    ap.add_argument("--runs", type=int, default=7, help="rounds; each runs every setting once")
    ap.add_argument("--configs", default="off,default,0.01",
                    help="sampler settings, the first one the baseline: off, default (unset) or an interval in s")
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--allreduce-iters", type=int, default=6000)
    ap.add_argument("--ddp-steps", type=int, default=300)
    ap.add_argument("--window", type=float, default=1.0,
                    help="rank 0 also times windows of this many seconds; the tables give the fastest")
    ap.add_argument("--job-timeout", type=float, default=300)
    ap.add_argument("--torch-root", metavar="SUITE",
                    help="run the workers with the torch of the root of tools/torch-root.sh SUITE (sid: torch 2.14) "
                         "through tests/helpers/torch-python; with the generic flight recorder, off also turns it off")
    ap.add_argument("--json-out", help="also write the run (every result, its settings and facts) to this file")
    ap.add_argument("--from-json", help="run nothing: report the run saved with --json-out in this file")
    ap.add_argument("--write", action="store_true",
                    help=f"update '{SECTION[3:]}' in docs/benchmarks/sampler.md (with --torch-root: that torch's own section, "
                         "right after it)")
    ap.add_argument("--docs", default=str(ROOT / "docs" / "benchmarks" / "sampler.md"))
    args = ap.parse_args()

    if args.from_json:
        saved = json.loads(Path(args.from_json).read_text())
        params = argparse.Namespace(**saved["params"])
        configs = [parse_config(c) for c in params.configs.split(",")]
        samples = {c: saved["results"][params.configs.split(",")[i].strip()] for i, c in enumerate(configs)}
        info, command = saved["info"], saved["command"]
    else:
        params = args
        configs = [parse_config(c) for c in args.configs.split(",")]
        if configs[0] != "0":
            raise SystemExit("--configs: the first setting is the baseline and must be off")
        samples, info = run_all(args, configs)
        # The command that makes this section, without the options that only say where files go.
        argv, skip = [], False
        for a in sys.argv[1:]:
            if skip:
                skip = False
            elif a in ("--json-out", "--docs"):
                skip = True
            elif not a.startswith(("--json-out=", "--docs=")):
                argv.append(a)
        command = " ".join(["/usr/bin/python3 bench/sampler_bench.py"] + argv)
        if args.json_out:
            keep = ("runs", "configs", "nproc", "allreduce_iters", "ddp_steps", "window")
            Path(args.json_out).write_text(json.dumps({
                "command": command, "info": info, "params": {k: getattr(args, k) for k in keep},
                "results": {tok.strip(): samples[c] for tok, c in zip(args.configs.split(","), configs)}}, indent=1))
    recorder = info.get("recorder", False)
    rows = summarize(samples, configs)
    # Whether the default's timings show nothing but noise, its direct CPU far below their scatter.
    info["quiet_default"] = all(
        not beyond_noise(r[k]) and r["of_process"] * 10 < noise(r[k])
        for r in rows if r["cfg"] is None for k, _, _ in METRICS)
    tab = tables(rows, configs, params.runs, params.window, recorder)
    read = reading(rows, configs, recorder)
    print(f"machine: {info['machine']}; load average {info['load0']:.2f} -> {info['load1']:.2f}; "
          f"{info['minutes']:.1f} min\n")
    print(tab[0])
    print()
    print(tab[1])
    print()
    print(read)
    if args.write:
        title = info.get("title", SECTION)
        write_section(args.docs, section(command, info, tab, read, params, configs), title,
                      after=None if title == SECTION else SECTION)
        log(f"wrote '{title[3:]}' in {args.docs}")


if __name__ == "__main__":
    main()
