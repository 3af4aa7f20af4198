#!/usr/bin/python3
"""Store barrier with torch's Python clients: rankrun-store, torch's server, and the store that
rankrun hosts for a job, in one run.

    /usr/bin/python3 bench/hosted_store_bench.py [--build-dir build] [--clients 256,1024,4096]
                                                 [--procs 8] [--rounds 3] [--case-timeout 120]

A barrier of N torch 1.13 `torch.distributed.TCPStore` client objects (is_master=False,
wait_for_workers=False), spread over P worker processes (N/P each, one thread per client, since
the store calls release the GIL): every client connects, ADDs a counter, and WAITs on a key that
the client whose ADD returned N SETs first, as the barrier (d) of bench/store_bench.py does. Time:
from the first connect to the last client's return from WAIT, over all P processes (the same
definition as store_bench.py's (d)), measured inside the workers with CLOCK_MONOTONIC.

The three servers, each with its own P workers running this same script (`--worker`):
  - rankrun-store: workers started by this script with MASTER_ADDR / MASTER_PORT pointing at it;
  - torch: torch's own TCPStore server (`/usr/bin/python3 -c`, as store_bench.py starts it);
  - rankrun hosted: `rankrun --nproc-per-node P SCRIPT --worker DIR`; the workers find the store
    rankrun hosts for the job in MASTER_ADDR / MASTER_PORT. Only the barrier is timed, not the
    launch.
All three worker groups are started first and stay up (idle, blocked on a FIFO) for the whole
run; the rounds of each N alternate the order of the servers. Each cell is the median of --rounds
runs, or a single run when the first one takes longer than --long seconds; a round that does not
finish within --case-timeout seconds is abandoned: that server's workers (and rankrun) are killed
and its larger cells skipped.
"""

import argparse
import datetime
import json
import os
import platform
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from benchlib import (  # noqa: E402  (the servers' start and stop, the fd limit, the table)
    TORCH_SERVER, built, middle, raise_nofile, require_built, start_server, stop_server, table)

SCRIPT = os.path.abspath(__file__)
SERVERS = ("rankrun-store", "torch", "rankrun hosted")
# Every client here comes from 127.0.0.1, as from nodes behind NAT: rankrun's stores take at most
# 1024 connections from one address unless told otherwise (4096 1.13 clients are 8192).
PER_ADDRESS = 20000


def send_line(fd, obj):
    data = (json.dumps(obj) + "\n").encode()
    assert len(data) < select.PIPE_BUF  # one atomic write on a FIFO shared by several writers
    os.write(fd, data)


# --- worker: one of the P processes ----------------------------------------------------------


def worker(sync_dir):
    raise_nofile()
    import torch.distributed as dist

    rank = int(os.environ["RANK"])
    procs = int(os.environ["WORLD_SIZE"])
    host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    threading.stack_size(512 * 1024)
    results = os.open(os.path.join(sync_dir, "results"), os.O_WRONLY)
    commands = open(os.path.join(sync_dir, f"cmd-{rank}"), "r")  # the driver holds it open: no EOF
    send_line(results, {"ready": rank, "pid": os.getpid(), "port": port})
    for line in commands:
        cmd = json.loads(line)
        if cmd.get("stop"):
            break
        n, count_key, go_key = cmd["clients"], cmd["prefix"] + "/count", cmd["prefix"] + "/go"
        mine = len(range(rank, n, procs))
        timeout = datetime.timedelta(seconds=cmd["timeout"])
        stores, released, errors = [None] * mine, [0.0] * mine, []

        def client(i):
            try:
                s = dist.TCPStore(host, port, None, False, timeout, wait_for_workers=False)
                stores[i] = s
                if s.add(count_key, 1) == n:
                    s.set(go_key, "1")
                s.wait([go_key])
                released[i] = time.monotonic()
            except Exception as e:  # reported to the driver, which fails the round
                errors.append(repr(e))

        while (delay := cmd["start_at"] - time.monotonic()) > 0:
            time.sleep(delay)
        first = time.monotonic()
        threads = [threading.Thread(target=client, args=(i,)) for i in range(mine)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        stores.clear()  # closes every connection before the next round
        send_line(results, {"done": rank, "step": cmd["step"], "first": first,
                            "last": max(released, default=first), "errors": errors[:3]})
    commands.close()
    os.close(results)


# --- driver ----------------------------------------------------------------------------------


class RoundFailed(Exception):
    pass


class Fleet:
    """One server and the P worker processes that run barriers against it."""

    def __init__(self, name, procs, build_dir, tmp):
        self.name, self.procs = name, procs
        self.dir = tempfile.mkdtemp(prefix=name.replace(" ", "-") + "-", dir=tmp)
        self.server = self.rankrun = None
        self.workers, self.pids, self.cmd_fds = [], {}, []
        self.step, self.buf, self.dead = 0, b"", False
        os.mkfifo(os.path.join(self.dir, "results"))
        # Read and write ends held open here, so that neither side's open() blocks and the
        # workers never see EOF.
        self.results = os.open(os.path.join(self.dir, "results"), os.O_RDWR | os.O_NONBLOCK)
        for r in range(procs):
            os.mkfifo(os.path.join(self.dir, f"cmd-{r}"))
            self.cmd_fds.append(os.open(os.path.join(self.dir, f"cmd-{r}"), os.O_RDWR))
        worker_cmd = [sys.executable, SCRIPT, "--worker", self.dir]
        if name == "rankrun hosted":
            self.log = open(os.path.join(self.dir, "rankrun.log"), "w")
            env = dict(os.environ, PYTHON_EXEC=sys.executable)
            env.pop("MASTER_ADDR", None)
            env.pop("MASTER_PORT", None)
            self.rankrun = subprocess.Popen(
                [built(build_dir, "rankrun"), "--nproc-per-node", str(procs),
                 "--term-timeout", "3", "--store-connections-per-address", str(PER_ADDRESS), *worker_cmd[1:]],
                stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT, env=env)
            return
        if name == "rankrun-store":
            self.server, port = start_server(
                [built(build_dir, "rankrun-store"), "--host", "127.0.0.1", "--port", "0",
                 "--max-connections-per-address", str(PER_ADDRESS)])
        else:
            self.server, port = start_server([sys.executable, "-c", TORCH_SERVER])
        for r in range(procs):
            env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(r),
                       LOCAL_RANK=str(r), WORLD_SIZE=str(procs), LOCAL_WORLD_SIZE=str(procs))
            self.workers.append(subprocess.Popen(worker_cmd, stdin=subprocess.DEVNULL, env=env))

    def alive(self):
        if self.rankrun is not None:
            return self.rankrun.poll() is None
        return all(w.poll() is None for w in self.workers)

    def messages(self, deadline):
        """Yields the workers' messages until `deadline`; RoundFailed if a worker dies."""
        while True:
            while b"\n" in self.buf:
                line, self.buf = self.buf.split(b"\n", 1)
                yield json.loads(line)
            left = deadline - time.monotonic()
            if left <= 0:
                raise RoundFailed("timeout")
            if not self.alive():
                raise RoundFailed("a worker or rankrun exited: " + self.log_tail())
            if select.select([self.results], [], [], min(left, 1.0))[0]:
                try:
                    self.buf += os.read(self.results, 65536)
                except BlockingIOError:
                    pass

    def wait_ready(self, timeout):
        deadline = time.monotonic() + timeout
        for msg in self.messages(deadline):
            self.pids[msg["ready"]] = msg["pid"]
            self.port = msg["port"]
            if len(self.pids) == self.procs:
                return

    def barrier(self, n, timeout):
        """One barrier of n clients; milliseconds from the first connect to the last release."""
        self.step += 1
        cmd = {"step": self.step, "clients": n, "prefix": f"/bench/barrier/{n}/{self.step}",
               "start_at": time.monotonic() + 0.2, "timeout": timeout + 60}
        for fd in self.cmd_fds:
            send_line(fd, cmd)
        done = []
        for msg in self.messages(time.monotonic() + timeout):
            if msg.get("step") != self.step:
                continue
            if msg["errors"]:
                raise RoundFailed(f"rank {msg['done']}: {msg['errors'][0]}")
            done.append(msg)
            if len(done) == self.procs:
                return 1000 * (max(m["last"] for m in done) - min(m["first"] for m in done))

    def log_tail(self):
        if self.rankrun is None:
            return ""
        self.log.flush()
        with open(os.path.join(self.dir, "rankrun.log")) as f:
            return f.read()[-2000:]

    def stop(self, force=False):
        """Stops the workers (politely unless `force`), rankrun and the server; kills leftovers."""
        if self.dead:
            return
        self.dead = True
        if not force:
            for fd in self.cmd_fds:
                try:
                    send_line(fd, {"stop": True})
                except OSError:
                    pass
        procs = [self.rankrun] if self.rankrun is not None else self.workers
        for p in procs:
            if force:
                p.send_signal(signal.SIGTERM if p is self.rankrun else signal.SIGKILL)
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for pid in self.pids.values():  # workers of a rankrun that did not take them down
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if self.dir.encode() in f.read():
                        os.kill(pid, signal.SIGKILL)
            except (FileNotFoundError, ProcessLookupError):
                pass
        if self.server is not None:
            stop_server(self.server)
        for fd in self.cmd_fds + [self.results]:
            os.close(fd)
        if self.rankrun is not None:
            self.log.close()


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build-dir", default=os.environ.get("RANKRUN_BUILD_DIR", "build"))
    parser.add_argument("--clients", default="256,1024,4096", help="barrier sizes N")
    parser.add_argument("--procs", type=int, default=8, help="worker processes P per server")
    parser.add_argument("--rounds", type=int, default=3, help="runs per cell (median)")
    parser.add_argument("--long", type=float, default=30, help="a cell whose first run takes longer runs once")
    parser.add_argument("--case-timeout", type=float, default=120, help="seconds before a run is abandoned")
    parser.add_argument("--servers", default=",".join(SERVERS), help="subset of: " + ", ".join(SERVERS))
    parser.add_argument("--worker", metavar="DIR", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args.worker)

    sizes = [int(x) for x in args.clients.split(",")]
    names = [s.strip() for s in args.servers.split(",")]
    for name in names:
        if name not in SERVERS:
            raise SystemExit(f"unknown server {name!r}")
    require_built([built(args.build_dir, "rankrun-store"), built(args.build_dir, "rankrun")],
                  "build the rankrun-store and rankrun targets")
    fds = raise_nofile()[1]  # inherited by the servers, rankrun and the workers
    need = 2 * max(sizes) + 64  # each 1.13 client opens 2 connections to the server
    if fds < need:
        print(f"# warning: RLIMIT_NOFILE {fds} < {need} needed by the server at N = {max(sizes)}")
    import torch

    began = time.time()
    print(f"# hosted store barrier benchmark, {datetime.date.today()}: {os.cpu_count()} cores, "
          f"{platform.platform()}, torch {torch.__version__}, RLIMIT_NOFILE {fds}, "
          f"P = {args.procs} worker processes, load average {loadavg()}", flush=True)
    tmp = tempfile.mkdtemp(prefix="rankrun-hosted-bench-")
    fleets = {}
    notes = []
    cells = {name: {} for name in names}  # name -> n -> list of ms, or a note string
    try:
        for name in names:
            fleets[name] = Fleet(name, args.procs, args.build_dir, tmp)
        for name, fleet in fleets.items():
            try:
                fleet.wait_ready(300)
            except RoundFailed as e:
                notes.append(f"{name}: workers not ready ({e})")
                fleet.stop(force=True)
        ports = ", ".join(f"{n} on {f.port}" for n, f in fleets.items() if not f.dead)
        print(f"# workers ready after {time.time() - began:.0f} s; servers: {ports}", flush=True)
        for n in sizes:
            for r in range(args.rounds):
                order = names[r % len(names):] + names[:r % len(names)]
                for name in order:
                    fleet = fleets[name]
                    if isinstance(cells[name].get(n), str):
                        continue
                    if fleet.dead:
                        cells[name][n] = "skipped"
                        continue
                    runs = cells[name].setdefault(n, [])
                    if r > 0 and runs[0] > args.long * 1000:
                        continue  # a long cell runs once
                    try:
                        ms = fleet.barrier(n, args.case_timeout)
                    except RoundFailed as e:
                        why = f"timed out (> {args.case_timeout:.0f} s)" if str(e) == "timeout" else "failed"
                        cells[name][n] = why
                        notes.append(f"{name}, N = {n}: {why}: {e}" if why == "failed" else
                                     f"{name}, N = {n}: run abandoned after {args.case_timeout:.0f} s; "
                                     f"its workers were killed and larger N skipped")
                        fleet.stop(force=True)
                        continue
                    runs.append(ms)
                    print(f"#   {name:15} N = {n:5}  run {len(runs)}: {ms:9.1f} ms   (load {loadavg()})", flush=True)
    finally:
        for fleet in fleets.values():
            fleet.stop()
        shutil.rmtree(tmp, ignore_errors=True)

    def cell(name, n):
        runs = cells[name].get(n, "skipped")
        if isinstance(runs, str):
            return runs
        if not runs:
            return "skipped"
        return f"{middle(runs):,.0f}" + (" (1 run)" if len(runs) == 1 and args.rounds > 1 else "")

    table(
        f"barrier: N torch 1.13 Python TCPStore clients in {args.procs} processes connect, ADD, WAIT on a key "
        f"the last one sets (ms from the first connect to the last release, median of {args.rounds})",
        ["clients", *[f"{name} ms" for name in names]],
        [[str(n), *[cell(name, n) for name in names]] for n in sizes],
    )
    for note in notes:
        print(f"\n- {note}")
    print(f"\ntotal {time.time() - began:.0f} s, load average at the end {loadavg()}")


if __name__ == "__main__":
    main()
