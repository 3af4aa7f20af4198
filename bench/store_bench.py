#!/usr/bin/python3
"""Store benchmark: rankrun-store against torch's own TCPStore server, in one run.

    /usr/bin/python3 bench/store_bench.py [--build-dir build] [--seconds 1]

Both servers run side by side on 127.0.0.1 (torch's started with `/usr/bin/python3 -c`), and
each one is driven in turn by:
  (a) torch's Python clients, one process per connection (1, 8, 32), ops set / get / add;
  (b) bench/store_loadgen (C++, StoreClient, one thread per connection), the same ops, speaking
      the 1.13 protocol to both servers so that the bytes on the wire are identical;
  (c) store_loadgen with 16 requests in flight per connection (server capacity; torch's clients
      never pipeline);
  (d) a barrier of 256 / 1024 / 4096 simulated clients: connect, ADD a counter, WAIT on a key
      that the last arrival sets (median of 3).
Prints markdown tables (the format of docs/benchmarks.md). Takes about 2 minutes.
bench/hosted_store_bench.py runs the barrier with torch's Python clients instead, against both
servers and the store that rankrun hosts for a job.
"""

import argparse
import datetime
import json
import multiprocessing
import os
import platform
import resource
import subprocess
import sys
import time

OPS = ("set", "get", "add")
CONNECTIONS = (1, 8, 32)
BARRIER = (256, 1024, 4096)
VALUE = "value-of-sixteen"

TORCH_SERVER = """
import datetime, sys, torch.distributed as dist
s = dist.TCPStore("127.0.0.1", 0, None, True, datetime.timedelta(seconds=600), wait_for_workers=False)
print("listening on 127.0.0.1:%d" % s.port, flush=True)
sys.stdin.read()
"""


def raise_fd_limit():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard if hard != resource.RLIM_INFINITY else 1 << 16
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    return want


def start(cmd):
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    if not line.startswith("listening on "):
        proc.kill()
        raise SystemExit(f"server {cmd[0]} did not start: {line!r}")
    return proc, int(line.rsplit(":", 1)[1])


def stop(proc):
    proc.stdin.close()
    proc.terminate()
    proc.wait(timeout=10)


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
                    "ops_per_s": sorted(rates)[len(rates) // 2],
                    "p50_us": percentile(latencies, 0.5),
                    "p99_us": percentile(latencies, 0.99),
                }
            )
    return out


# --- (b, c, d) the C++ load generator --------------------------------------------------------


def loadgen(binary, *args):
    out = subprocess.run([binary, *map(str, args)], check=True, capture_output=True, text=True, timeout=300)
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def loadgen_cell(binary, port, op, n, seconds, depth=1):
    (row,) = loadgen(binary, "ops", "--port", port, "--protocol", "1.13", "--ops", op, "--connections", n,
                     "--seconds", seconds, "--depth", depth, "--latencies", "1")
    return row["ops_per_s"], row["latencies_us"]


def table(title, columns, rows):
    print(f"\n{title}\n")
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for row in rows:
        print("| " + " | ".join(row) + " |")


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
    args = parser.parse_args()
    store_bin = os.path.join(args.build_dir, "rendezvous", "rankrun-store")
    loadgen_bin = os.path.join(args.build_dir, "bench", "store_loadgen")
    for b in (store_bin, loadgen_bin):
        if not os.access(b, os.X_OK):
            raise SystemExit(f"{b} missing: build the rankrun-store and store_loadgen targets")

    fds = raise_fd_limit()
    import torch  # imported once here, inherited by the forked client processes
    import torch.distributed

    began = time.time()
    ours, our_port = start([store_bin, "--host", "127.0.0.1", "--port", "0"])
    theirs, their_port = start([sys.executable, "-c", TORCH_SERVER])
    servers = {"rankrun": our_port, "torch": their_port}
    print(f"# store benchmark, {datetime.date.today()}: {os.cpu_count()} cores, {platform.platform()}, "
          f"torch {torch.__version__}, RLIMIT_NOFILE {fds}")
    try:
        print(f"# rankrun-store on port {our_port}, torch's server on port {their_port}", flush=True)
        cells = [(op, n) for op in OPS for n in CONNECTIONS]
        # Forked before this process opens any store connection (torch's client starts threads).
        pool = multiprocessing.get_context("fork").Pool(max(CONNECTIONS))
        for port in servers.values():
            pool.apply(preset, (port,))
        py = interleaved(servers, args.rounds, cells, lambda port, op, n: python_cell(pool, port, op, n, args.seconds))
        pool.close()
        pool.join()
        cxx = interleaved(servers, args.rounds, cells,
                          lambda port, op, n: loadgen_cell(loadgen_bin, port, op, n, args.seconds))
        piped = interleaved(servers, 1, [(op, n) for op in ("get", "add") for n in CONNECTIONS],
                            lambda port, op, n: loadgen_cell(loadgen_bin, port, op, n, args.seconds, 16))
        barrier = {
            name: loadgen(loadgen_bin, "barrier", "--port", port, "--protocol", "1.13",
                          "--clients", ",".join(map(str, BARRIER)), "--repeat", 3)
            for name, port in servers.items()
        }
    finally:
        stop(ours)
        stop(theirs)

    ops_table("(a) torch 1.13 Python clients, one process per connection", py["rankrun"], py["torch"])
    ops_table("(b) C++ load generator (StoreClient, one request at a time per connection)", cxx["rankrun"], cxx["torch"])
    ops_table("(c) C++ load generator, 16 requests in flight per connection (server capacity)",
              piped["rankrun"], piped["torch"])
    table(
        "(d) barrier: N clients connect, ADD, WAIT on a key the last one sets (median of 3, ms)",
        ["clients", "rankrun", "torch", "ratio"],
        [
            [str(a["clients"]), f"{a['median_ms']:.0f}", f"{b['median_ms']:.0f}",
             f"{b['median_ms'] / a['median_ms']:.1f}x faster"]
            for a, b in zip(barrier["rankrun"], barrier["torch"])
        ],
    )
    print(f"\ntotal {time.time() - began:.0f} s")


if __name__ == "__main__":
    main()
