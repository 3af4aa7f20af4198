#!/usr/bin/python3
"""Store benchmark: rankrun-store against torch's own TCPStore server, in one run.

    /usr/bin/python3 bench/store_bench.py [--build-dir build] [--seconds 0.5] [--rounds 3]
        [--barrier 1024,4096,16384,19000] [--repeat 5] [--per-source 200] [--tiny]

Both servers run side by side on 127.0.0.1 (torch's started with `/usr/bin/python3 -c`), and
each one is driven in turn by:
  (a) torch's Python clients, one process per connection (1, 8, 32), ops set / get / add;
  (b) bench/store_loadgen (C++, StoreClient, one thread per connection), the same ops, speaking
      the protocol of this torch to both servers (1.13's, or 2.2's and later with VALIDATE and
      PING) so that the bytes on the wire are identical;
  (c) store_loadgen with 16 requests in flight per connection (server capacity; torch's clients
      never pipeline);
  (d) a barrier of N simulated clients (store_loadgen barrier): connect, ADD a counter, WAIT on a
      key that the last arrival sets; the clients come from --per-source clients per address
      (127.2.0.1, 127.2.0.2, ...), as they come from many nodes. Servers: rankrun-store, the store
      rankrun hosts for a job (`rankrun --nproc-per-node 1` holding one worker) and torch's server
      (libuv's where this torch has it, as the wheels do). The runs of each N alternate between the
      servers; each cell is the median (min-max) of
      --repeat runs, with the host's ListenOverflows counted during them. A server whose run
      takes longer than --long seconds runs once at that N and no larger N.
Prints markdown tables (the format of docs/benchmarks/store.md). About 5 minutes with the defaults;
--tiny runs every part at a size of seconds (make test does, so that a change that breaks the
benchmark fails the tests).
bench/hosted_store_bench.py runs the barrier with torch's Python clients instead.
"""

import argparse
import datetime
import json
import multiprocessing
import os
import platform
import subprocess
import sys
import tempfile
import time

from benchlib import STARTED, TORCH_SERVER, built, middle, proc_stat, raise_nofile, require_built, start_server, \
    stop_server, table

OPS = ("set", "get", "add")
PROTOCOL = "1.13"  # store_loadgen's: this torch's generation (main() sets it)
VALUE = "value-of-sixteen"

# The job's one worker: says where the store is, then holds the job open until rankrun stops it.
HOLD_WORKER = """
import os, time
with open(os.environ["STORE_BENCH_PORT_FILE"] + ".tmp", "w") as f:
    f.write(os.environ["MASTER_PORT"])
os.rename(os.environ["STORE_BENCH_PORT_FILE"] + ".tmp", os.environ["STORE_BENCH_PORT_FILE"])
time.sleep(3600)
"""

def start_hosted(rankrun_bin, workdir):
    """A job of one worker that holds it open: the store that rankrun hosts, and its port."""
    port_file = os.path.join(workdir, "port")
    script = os.path.join(workdir, "hold.py")
    with open(script, "w") as f:
        f.write(HOLD_WORKER)
    proc = subprocess.Popen(
        [rankrun_bin, "--nproc-per-node", "1", "--term-timeout", "3", "--log-dir", os.path.join(workdir, "logs"),
         script],
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, env=dict(os.environ, STORE_BENCH_PORT_FILE=port_file),
        start_new_session=True)
    STARTED.append(proc)
    deadline = time.time() + 30
    while not os.path.exists(port_file):
        if proc.poll() is not None or time.time() > deadline:
            proc.kill()
            raise SystemExit("rankrun's job did not start: see its output above")
        time.sleep(0.05)
    with open(port_file) as f:
        return proc, int(f.read())


def percentile(sorted_values, p):
    if not sorted_values:
        return 0.0
    return sorted_values[int(p * (len(sorted_values) - 1))]


# --- (a) torch's Python clients, one forked process per connection --------------------------


def python_worker(port, op, rank, start_at, seconds):
    import torch.distributed as dist

    store = dist.TCPStore("127.0.0.1", port, None, False, datetime.timedelta(seconds=60))
    key = f"bench/set/{rank}" if op == "set" else f"bench/{op}"
    call = {
        "set": lambda: store.set(key, VALUE),
        "get": lambda: store.get(key),
        "add": lambda: store.add(key, 1),
    }[op]
    latencies = []
    clock = time.perf_counter_ns
    while time.time() < start_at:
        time.sleep(0.001)
    end = clock() + int(seconds * 1e9)
    while True:
        t0 = clock()
        if t0 >= end:
            break
        call()
        latencies.append(clock() - t0)
    store.num_keys()  # sets have no reply: wait until the server has taken them all
    return latencies


def preset(port):
    import torch.distributed as dist

    dist.TCPStore("127.0.0.1", port, None, False, datetime.timedelta(seconds=60)).set("bench/get", VALUE)


def python_cell(pool, port, op, n, seconds):
    start_at = time.time() + 0.05 + 0.01 * n
    results = pool.starmap(python_worker, [(port, op, r, start_at, seconds) for r in range(n)])
    elapsed = time.time() - start_at
    latencies = [x / 1000 for r in results for x in r]
    return len(latencies) / elapsed, latencies


def interleaved(servers, rounds, cells, run_cell):
    """Runs every (op, connections) cell `rounds` times, alternating which server goes first, so
    that drift on this small shared machine hits both alike. Median ops/s, pooled latencies."""
    out = {name: [] for name in servers}
    for op, n in cells:
        samples = {name: ([], []) for name in servers}
        for r in range(rounds):
            order = list(servers.items()) if r % 2 == 0 else list(reversed(servers.items()))
            for name, port in order:
                rate, latencies = run_cell(port, op, n)
                samples[name][0].append(rate)
                samples[name][1].extend(latencies)
        for name, (rates, latencies) in samples.items():
            latencies.sort()
            out[name].append(
                {
                    "op": op,
                    "connections": n,
                    "ops_per_s": middle(rates),
                    "p50_us": percentile(latencies, 0.5),
                    "p99_us": percentile(latencies, 0.99),
                }
            )
    return out


# --- (b, c, d) the C++ load generator --------------------------------------------------------


class LoadgenFailed(Exception):
    pass


def loadgen(binary, *args):
    out = subprocess.run([binary, *map(str, args)], capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        raise LoadgenFailed(f"store_loadgen {' '.join(map(str, args))}: {out.stderr.strip()}")
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def loadgen_cell(binary, port, op, n, seconds, depth=1):
    (row,) = loadgen(binary, "ops", "--port", port, "--protocol", PROTOCOL, "--ops", op, "--connections", n,
                     "--seconds", seconds, "--depth", depth, "--latencies", "1")
    return row["ops_per_s"], row["latencies_us"]


def cpu_ticks(pid):
    try:
        fields = proc_stat(f"/proc/{pid}/stat")
        return int(fields[11]) + int(fields[12])
    except (OSError, IndexError, ValueError):
        return None


def wait_idle(pids, limit_s=120):
    """Until none of `pids` used CPU for 0.2 s: a server still closing the last run's thousands of
    connections (torch's legacy server takes seconds) must not share the cores with the next run."""
    deadline = time.time() + limit_s
    before = [cpu_ticks(p) for p in pids]
    while time.time() < deadline:
        time.sleep(0.2)
        now = [cpu_ticks(p) for p in pids]
        if now == before:
            return
        before = now


def barrier_cells(binary, servers, pids, sizes, repeat, per_source, long_s):
    """{server: [{clients, runs_ms, overflows}]}; the runs of each size alternate the servers, and
    each run starts once every server is idle."""
    out = {name: [] for name in servers}
    given_up = set()
    for n in sizes:
        cells = {name: {"clients": n, "runs_ms": [], "overflows": 0} for name in servers if name not in given_up}
        for r in range(repeat):
            names = [name for name in servers if name in cells]
            for name in names if r % 2 == 0 else reversed(names):
                cell = cells[name]
                if cell.get("once"):
                    continue
                wait_idle(pids)
                try:
                    (row,) = loadgen(binary, "barrier", "--port", servers[name], "--protocol", PROTOCOL,
                                     "--clients", n, "--repeat", 1, "--per-source", per_source)
                except LoadgenFailed as e:
                    print(f"# {name}, {n} clients: {e}", flush=True)
                    cell["failed"] = cell["once"] = True
                    given_up.add(name)
                    continue
                cell["runs_ms"].append(row["median_ms"])
                print(f"#   {name:15} N = {n:6}: {row['median_ms']:9.1f} ms, {row['listen_overflows']} overflows", flush=True)
                cell["overflows"] += row["listen_overflows"]
                if row["median_ms"] > long_s * 1000:
                    cell["once"] = True
                    given_up.add(name)
        for name, cell in cells.items():
            out[name].append(cell)
    return out


def barrier_text(cell):
    if cell is None:
        return "-"
    if cell.get("failed"):
        return f"failed ({len(cell['runs_ms'])} of {len(cell['runs_ms']) + 1} runs passed)"
    runs = sorted(cell["runs_ms"])
    median = middle(runs)
    text = f"{median:,.0f}" if len(runs) == 1 else f"{median:,.0f} ({runs[0]:,.0f}-{runs[-1]:,.0f})"
    return text + (f", {cell['overflows']} overflows" if cell["overflows"] else "")


def ops_table(title, ours, theirs):
    rows = []
    for a, b in zip(ours, theirs):
        assert (a["op"], a["connections"]) == (b["op"], b["connections"])
        rows.append(
            [
                a["op"],
                str(a["connections"]),
                f"{a['ops_per_s']:,.0f}",
                f"{a['p50_us']:.0f} / {a['p99_us']:.0f}",
                f"{b['ops_per_s']:,.0f}",
                f"{b['p50_us']:.0f} / {b['p99_us']:.0f}",
                f"{a['ops_per_s'] / b['ops_per_s']:.2f}x",
            ]
        )
    table(
        title,
        ["op", "conns", "rankrun ops/s", "rankrun p50 / p99 µs", "torch ops/s", "torch p50 / p99 µs", "ratio"],
        rows,
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build-dir", default=os.environ.get("RANKRUN_BUILD_DIR", "build"))
    parser.add_argument("--seconds", type=float, default=0.5, help="duration of each ops measurement")
    parser.add_argument("--rounds", type=int, default=3, help="measurements per cell and server")
    parser.add_argument("--connections", default="1,8,32", help="connections of (a), (b) and (c)")
    parser.add_argument("--barrier", default="1024,4096,16384,19000", help="barrier sizes of (d)")
    parser.add_argument("--repeat", type=int, default=5, help="barrier runs per size and server")
    parser.add_argument("--per-source", type=int, default=200, help="barrier clients per source address")
    parser.add_argument("--long", type=float, default=10, help="a barrier run over this (s) is the server's last")
    parser.add_argument("--tiny", action="store_true", help="every part at a size of seconds (a check, not figures)")
    args = parser.parse_args()
    if args.tiny:
        args.seconds, args.rounds, args.connections = 0.05, 1, "1,2"
        args.barrier, args.repeat, args.per_source = "64,256", 1, 32
    connections = tuple(int(x) for x in args.connections.split(","))
    sizes = [int(x) for x in args.barrier.split(",")]
    build = os.path.abspath(args.build_dir)
    store_bin = built(build, "rankrun-store")
    loadgen_bin = built(build, "store_loadgen")
    rankrun_bin = built(build, "rankrun")
    require_built((store_bin, loadgen_bin, rankrun_bin),
                  "build rankrun, rankrun-store and store_loadgen first (make build)")
    fds = raise_nofile()[1]
    import torch  # imported once here, inherited by the forked client processes
    import torch.distributed

    global PROTOCOL
    short = torch.__version__.split("+")[0]
    major, minor = (int(x) for x in short.split(".")[:2])
    PROTOCOL = "1.13" if (major, minor) < (2, 2) else "newest"

    began = time.time()
    workdir = tempfile.TemporaryDirectory(prefix="rankrun-store-bench-")
    procs = {}
    ports = {}
    try:
        procs["rankrun-store"], ports["rankrun-store"] = start_server([store_bin, "--host", "127.0.0.1", "--port", "0"])
        procs["torch"], ports["torch"] = start_server([sys.executable, "-c", TORCH_SERVER])
        procs["rankrun hosted"], ports["rankrun hosted"] = start_hosted(rankrun_bin, workdir.name)
        pair = {"rankrun": ports["rankrun-store"], "torch": ports["torch"]}
        print(f"# store benchmark, {datetime.date.today()}: {os.cpu_count()} cores, {platform.platform()}, "
              f"torch {torch.__version__}, RLIMIT_NOFILE {fds}")
        print(f"# ports: {ports}", flush=True)
        cells = [(op, n) for op in OPS for n in connections]
        # Forked before this process opens any store connection (torch's client starts threads).
        pool = multiprocessing.get_context("fork").Pool(max(connections))
        for port in pair.values():
            pool.apply(preset, (port,))
        py = interleaved(pair, args.rounds, cells, lambda port, op, n: python_cell(pool, port, op, n, args.seconds))
        pool.close()
        pool.join()
        cxx = interleaved(pair, args.rounds, cells,
                          lambda port, op, n: loadgen_cell(loadgen_bin, port, op, n, args.seconds))
        piped = interleaved(pair, 1, [(op, n) for op in ("get", "add") for n in connections],
                            lambda port, op, n: loadgen_cell(loadgen_bin, port, op, n, args.seconds, 16))
        order = ["rankrun-store", "rankrun hosted", "torch"]
        barrier = barrier_cells(loadgen_bin, {name: ports[name] for name in order},
                                [procs[name].pid for name in order], sizes, args.repeat, args.per_source, args.long)
    finally:
        for proc in procs.values():
            stop_server(proc)
        workdir.cleanup()

    ops_table(f"(a) torch {short} Python clients, one process per connection", py["rankrun"], py["torch"])
    ops_table("(b) C++ load generator (StoreClient, one request at a time per connection)", cxx["rankrun"], cxx["torch"])
    ops_table("(c) C++ load generator, 16 requests in flight per connection (server capacity)",
              piped["rankrun"], piped["torch"])
    names = [f"torch {short}" if n == "torch" else n for n in order]
    rows = []
    for i, n in enumerate(sizes):
        row = [f"{n:,}"]
        for name in order:
            row.append(barrier_text(barrier[name][i] if i < len(barrier[name]) else None))
        rows.append(row)
    table(
        f"(d) barrier: N clients ({args.per_source} per source address) connect, ADD, WAIT on a key the last "
        f"one sets; ms, median (min-max) of {args.repeat}",
        ["clients", *[f"{name} ms" for name in names]],
        rows,
    )
    print(f"\ntorch's server: {procs['torch'].kind}; total {time.time() - began:.0f} s")


if __name__ == "__main__":
    main()
