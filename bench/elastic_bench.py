#!/usr/bin/env python3
"""Elastic (dynamic) rendezvous benchmarks; docs/benchmarks/elastic.md.

(a) bench/elastic_bench.cpp (`rankrun_elastic_bench`, built in --build-dir): the store host's
    RoundHost and N in-process agents running cluster::join_round; the running nodes' lease
    traffic. Its tables are printed as they come.
(b) K real agents on 127.0.0.1, all started at t0 (just before the first of them), each running
    one worker that prints time.time() as its first statement and exits: from t0 to the last
    worker's print. torch: `python3 -m torch.distributed.run --nnodes=K --rdzv_backend=c10d
    --rdzv_conf=is_host=1|0,last_call_timeout=1` (Debian's torch 1.13, with --redirects 9:0
    --tee 9:0 --monitor_interval 0.1 as in bench/launch_bench.py; in (d) its default of 5 s); rankrun: the same with
    `--nnodes=K:K`. Also the time one agent takes to import torch.distributed.run, which every
    torch agent pays before it joins.
(c) Node loss: 3 rankrun agents `--nnodes=2:3 --rdzv-backend=c10d --rdzv-conf=last_call_timeout=1
    --node-timeout=3`, one sleeping worker each that prints time.time() and WORLD_SIZE; once all 3
    workers run, SIGKILL one non-host rankrun; the time from the kill until both survivors'
    round-1 workers (WORLD_SIZE=2) print. With --torch-kill also torch 1.13 (capped at 30 s).
(d) Traffic while the job runs, real agents: K agents (1 sleeping worker each); the non-host agents
    reach the store host through a counting TCP proxy on 127.0.0.1 (`--rdzv-endpoint` = the proxy,
    the host's own agent listens behind it), so every byte between them and the store host is
    counted, both directions, payload only. Over a --traffic-window after the round formed:
    bytes per non-host node per second. rankrun runs with its default --node-timeout (15 s,
    lease interval 3 s); torch with its defaults (keep-alive 5 s, --monitor_interval 5 s).
    Also the size of torch's rendezvous state blob (pickled _RendezvousState, base64, as the c10d
    backend stores it) for N participants, computed with torch's own classes.

Every agent runs in a session of its own; everything started is stopped by pid (process group)
and a check for leftovers (processes running the worker scripts of this run) closes the run.
"""
import argparse
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from benchlib import PY, ROOT, built, fmt, have_torch_run, log

START = re.compile(r"start t=([0-9.]+) world=(\d+)")

WORKER = r'''
import os, sys, time
t = time.time()
print(f"start t={t:.6f} world={os.environ['WORLD_SIZE']} rank={os.environ['RANK']}", flush=True)
time.sleep(float(sys.argv[1]))
'''


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Agents:
    """Launcher processes, each in its own session; output to files."""

    def __init__(self, tmp, tag):
        self.tmp, self.tag, self.procs, self.logs = tmp, tag, [], []

    def start(self, cmd, env):
        path = Path(self.tmp) / f"{self.tag}-{len(self.procs)}.log"
        f = open(path, "w")
        p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, start_new_session=True, cwd=self.tmp)
        f.close()
        self.procs.append(p)
        self.logs.append(path)
        return p

    def starts(self, i):
        return [(float(m.group(1)), int(m.group(2))) for m in START.finditer(self.logs[i].read_text(errors="replace"))]

    def wait(self, timeout):
        deadline = time.time() + timeout
        for p in self.procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                return False
        return True

    def stop(self):
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for p in self.procs:
                if p.poll() is None or sig == signal.SIGKILL:
                    try:
                        os.killpg(p.pid, sig)
                    except ProcessLookupError:
                        pass
            t_end = time.time() + 5
            while time.time() < t_end and any(p.poll() is None for p in self.procs):
                time.sleep(0.05)
        for p in self.procs:
            p.wait()


def leftovers(marker):
    """Processes whose command line names this run's temporary directory."""
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmd:
            found.append((int(d.name), cmd.strip()))
    return found


def kill_leftovers(marker):
    left = leftovers(marker)
    for pid, cmd in left:
        log(f"leftover pid {pid}: {cmd}; killing it")
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return left


class CountingProxy:
    """Forwards 127.0.0.1:<port> to 127.0.0.1:<target>, counting the bytes of both directions."""

    def __init__(self, target):
        self.target = target
        self.lock = threading.Lock()
        self.up = self.down = 0
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(256)
        self.port = self.listener.getsockname()[1]
        self.closed = False
        self.socks = []
        threading.Thread(target=self._accept, daemon=True).start()

    def counts(self):
        with self.lock:
            return self.up, self.down

    def _accept(self):
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._open, args=(client,), daemon=True).start()

    def _open(self, client):
        # The store host may not listen yet (the agents start together): keep the client's
        # connection waiting meanwhile, as it would wait in the kernel's queue of the real port.
        deadline = time.time() + 60
        while True:
            try:
                server = socket.create_connection(("127.0.0.1", self.target))
                break
            except OSError:
                if self.closed or time.time() > deadline:
                    client.close()
                    return
                time.sleep(0.05)
        for sk in (client, server):
            sk.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.socks += [client, server]
        threading.Thread(target=self._pump, args=(client, server, True), daemon=True).start()
        threading.Thread(target=self._pump, args=(server, client, False), daemon=True).start()

    def _pump(self, src, dst, up):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                with self.lock:
                    if up:
                        self.up += len(data)
                    else:
                        self.down += len(data)
                dst.sendall(data)
        except OSError:
            pass
        for sk in (src, dst):
            try:
                sk.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self):
        self.closed = True
        self.listener.close()
        for sk in self.socks:
            try:
                sk.close()
            except OSError:
                pass


def torch_cmd(k, i, port, worker, tmp, nnodes, sleep=0, monitor=True):
    conf = f"is_host={1 if i == 0 else 0},last_call_timeout=1"
    return [PY, "-m", "torch.distributed.run", f"--nnodes={nnodes}", "--nproc_per_node=1", "--rdzv_backend=c10d",
            f"--rdzv_endpoint=127.0.0.1:{port}", "--rdzv_id=b", f"--rdzv_conf={conf}", "--max_restarts=0",
            *(["--monitor_interval=0.1"] if monitor else []), "--redirects", "9:0", "--tee", "9:0",
            "--log_dir", f"{tmp}/trlog-{k}-{i}-{port}", worker, str(sleep)]


def rankrun_cmd(rankrun, k, i, port, worker, nnodes, extra=(), sleep=0):
    return [rankrun, f"--nnodes={nnodes}", "--nproc-per-node=1", "--rdzv-backend=c10d",
            f"--rdzv-endpoint=127.0.0.1:{port}", "--rdzv-id=b", f"--rdzv-conf=is_host={1 if i == 0 else 0},last_call_timeout=1",
            *extra, worker, str(sleep)]


def formation(kind, k, args, tmp, worker, env):
    """Seconds from t0 to the last of K workers' first print; None when not all printed."""
    port = free_port()
    agents = Agents(tmp, f"{kind}-form-{k}")
    try:
        t0 = time.time()
        for i in range(k):
            if kind == "torch":
                cmd = torch_cmd(k, i, port, worker, tmp, str(k))
            else:
                cmd = rankrun_cmd(args.rankrun, k, i, port, worker, f"{k}:{k}")
            agents.start(cmd, env)
        done = agents.wait(args.timeout)
        starts = [agents.starts(i) for i in range(k)]
        if not done or any(len(s) != 1 for s in starts):
            log(f"{kind} K={k}: exited={done}, prints per agent {[len(s) for s in starts]}")
            for i in range(k):
                log(f"--- {agents.logs[i]}:\n" + agents.logs[i].read_text(errors='replace')[-1500:])
            return None
        return max(s[0][0] for s in starts) - t0
    finally:
        agents.stop()


def node_loss(kind, args, tmp, worker, env):
    """3 agents (--nnodes=2:3); SIGKILL agent 2 once all 3 workers run. Seconds from the kill to the
    last survivor's round-1 print (WORLD_SIZE=2); None when it did not come within --loss-cap."""
    port = free_port()
    agents = Agents(tmp, f"{kind}-loss")
    try:
        for i in range(3):
            if kind == "torch":
                cmd = torch_cmd(3, i, port, worker, tmp, "2:3", sleep=120)
            else:
                cmd = rankrun_cmd(args.rankrun, 3, i, port, worker, "2:3", extra=("--node-timeout=3",), sleep=120)
            agents.start(cmd, env)
            if i == 0:
                time.sleep(0.2)  # the host first, as an operator would start it
        deadline = time.time() + args.timeout
        while time.time() < deadline and not all(any(w == 3 for _, w in agents.starts(i)) for i in range(3)):
            time.sleep(0.05)
        if not all(any(w == 3 for _, w in agents.starts(i)) for i in range(3)):
            log(f"{kind} node loss: round 0 did not form")
            return None
        time.sleep(1.0)
        t_kill = time.time()
        os.kill(agents.procs[2].pid, signal.SIGKILL)
        deadline = t_kill + args.loss_cap
        result = None
        while time.time() < deadline:
            survivors = [[t for t, w in agents.starts(i) if w == 2 and t > t_kill] for i in (0, 1)]
            if all(survivors):
                result = max(s[0] for s in survivors) - t_kill
                break
            time.sleep(0.02)
        return result
    finally:
        agents.stop()


def traffic(kind, k, args, tmp, worker, env):
    """Bytes per non-host node per second (up = to the store host, down = from it) over the window."""
    port = free_port()
    proxy = CountingProxy(port)
    agents = Agents(tmp, f"{kind}-traffic-{k}")
    try:
        for i in range(k):
            p = port if i == 0 else proxy.port
            if kind == "torch":
                cmd = torch_cmd(k, i, p, worker, tmp, str(k), sleep=600, monitor=False)  # torch's default 5 s
            else:
                cmd = rankrun_cmd(args.rankrun, k, i, p, worker, f"{k}:{k}", sleep=600)
            agents.start(cmd, env)
            if i == 0:
                time.sleep(0.2)
        deadline = time.time() + args.timeout
        while time.time() < deadline and not all(agents.starts(i) for i in range(k)):
            time.sleep(0.1)
        if not all(agents.starts(i) for i in range(k)):
            log(f"(d) {kind} K={k}: the round did not form")
            return None
        time.sleep(args.traffic_settle)
        u0, d0 = proxy.counts()
        time.sleep(args.traffic_window)
        u1, d1 = proxy.counts()
        if any(p.poll() is not None for p in agents.procs):
            log(f"(d) {kind} K={k}: an agent exited during the window")
            return None
        per = (k - 1) * args.traffic_window
        return (u1 - u0) / per, (d1 - d0) / per
    finally:
        agents.stop()
        proxy.close()


def torch_state_sizes(ns):
    code = ("import pickle, base64, datetime, sys\n"
            "from torch.distributed.elastic.rendezvous.dynamic_rendezvous import _RendezvousState, _NodeDesc\n"
            "for n in map(int, sys.argv[1:]):\n"
            "    s = _RendezvousState(); now = datetime.datetime.utcnow(); s.complete = True\n"
            "    for i in range(n):\n"
            "        node = _NodeDesc(f'10.0.{i // 250}.{i % 250}', 100000 + i, 0)\n"
            "        s.participants[node] = i; s.last_heartbeats[node] = now\n"
            "    print(n, len(base64.b64encode(pickle.dumps(s))))\n")
    out = subprocess.run([PY, "-c", code, *map(str, ns)], capture_output=True, text=True, check=True).stdout
    return [tuple(map(int, line.split())) for line in out.splitlines()]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", default=str(ROOT / "build-bench"), help="where rankrun_elastic_bench was built")
    ap.add_argument("--rankrun", default=str(ROOT / "build" / "launcher" / "rankrun"))
    ap.add_argument("--cpp-args", default="", help="extra arguments for rankrun_elastic_bench, e.g. '--repeat 5'")
    ap.add_argument("--nodes", default="2,4,8", help="K for (b)")
    ap.add_argument("--runs", type=int, default=3, help="runs per cell of (b) and (c)")
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--loss-cap", type=float, default=30)
    ap.add_argument("--skip", default="", help="parts to skip: a,b,c,d")
    ap.add_argument("--torch-kill", action="store_true", help="(c) with torch 1.13 too")
    ap.add_argument("--keep-logs", action="store_true", help="keep the agents' logs (their directory is printed)")
    ap.add_argument("--traffic-nodes", default="2,4,8", help="K for (d)")
    ap.add_argument("--traffic-settle", type=float, default=5, help="(d): seconds after every worker runs")
    ap.add_argument("--traffic-window", type=float, default=30, help="(d): seconds counted")
    args = ap.parse_args()
    # The agents run in a directory of their own: paths given relative to here still work.
    args.build_dir, args.rankrun = os.path.abspath(args.build_dir), os.path.abspath(args.rankrun)
    skip = set(filter(None, args.skip.split(",")))
    torch = have_torch_run()
    print(f"machine: {os.cpu_count()} CPUs, {os.uname().sysname} {os.uname().release}; load average "
          f"{os.getloadavg()[0]:.2f} at the start; torch {'present' if torch else 'absent'}", flush=True)

    if "a" not in skip:
        exe = built(args.build_dir, "rankrun_elastic_bench")
        print(f"\n## (a) {exe} {args.cpp_args}\n", flush=True)
        rc = subprocess.run([str(exe), *args.cpp_args.split()]).returncode
        if rc != 0:
            log(f"rankrun_elastic_bench exited {rc}")

    tmp = tempfile.mkdtemp(prefix="rr-elastic-bench-")
    worker = str(Path(tmp) / "worker.py")
    Path(worker).write_text(WORKER)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    try:
        if "b" not in skip:
            ks = [int(x) for x in args.nodes.split(",")]
            rows = []
            import_s = []
            if torch:
                for _ in range(args.runs):
                    t = time.time()
                    subprocess.run([PY, "-c", "import torch.distributed.run"], check=True)
                    import_s.append(time.time() - t)
            for k in ks:
                row = {"k": k, "rankrun": [], "torch": [], "torch_failed": 0, "rankrun_failed": 0}
                for _ in range(args.runs):
                    for kind in (["rankrun", "torch"] if torch else ["rankrun"]):
                        s = formation(kind, k, args, tmp, worker, env)
                        if s is None:
                            row[f"{kind}_failed"] += 1
                        else:
                            row[kind].append(s)
                        log(f"(b) {kind} K={k}: {s}")
                rows.append(row)
            print(f"\n## (b) K agents on 127.0.0.1, 1 worker each: from the start of the agents to every worker running "
                  f"(s, median (min-max) of {args.runs})\n")
            print("| K | rankrun --nnodes=K:K | torch 1.13 c10d --nnodes=K | torch / rankrun |")
            print("|---|---|---|---|")
            for r in rows:
                ratio = (f"{statistics.median(r['torch']) / statistics.median(r['rankrun']):.0f}x"
                         if r["torch"] and r["rankrun"] else "-")
                fail = lambda kind: f" ({r[kind + '_failed']} failed)" if r[kind + "_failed"] else ""
                print(f"| {r['k']} | {fmt(r['rankrun'], 1, 3)}{fail('rankrun')} | {fmt(r['torch'], 1, 2)}{fail('torch')} | {ratio} |")
            if import_s:
                print(f"\nOne `import torch.distributed.run` alone (each torch agent pays it first): {fmt(import_s, 1, 2)} s")
            sys.stdout.flush()

        if "c" not in skip:
            kinds = ["rankrun"] + (["torch"] if torch and args.torch_kill else [])
            results = {}
            for kind in kinds:
                results[kind] = []
                for _ in range(args.runs if kind == "rankrun" else 1):
                    s = node_loss(kind, args, tmp, worker, env)
                    log(f"(c) {kind}: {s}")
                    results[kind].append(s)
            print("\n## (c) 3 agents --nnodes=2:3, SIGKILL of one non-host agent: to both survivors' round-1 workers "
                  "running (s)\n")
            print("| launcher | runs | kill -> round 1 running |")
            print("|---|---|---|")
            for kind, res in results.items():
                ok = [x for x in res if x is not None]
                miss = len(res) - len(ok)
                what = fmt(ok, 1, 2) + (f"; {miss} of {len(res)}: no round 1 within {args.loss_cap:.0f} s" if miss else "")
                label = "rankrun --node-timeout=3" if kind == "rankrun" else "torch 1.13"
                print(f"| {label} | {len(res)} | {what} |")

        if "d" not in skip:
            rows = []
            for k in [int(x) for x in args.traffic_nodes.split(",")]:
                row = {"k": k}
                for kind in (["rankrun", "torch"] if torch else ["rankrun"]):
                    row[kind] = traffic(kind, k, args, tmp, worker, env)
                    log(f"(d) {kind} K={k}: {row[kind]}")
                rows.append(row)
            print(f"\n## (d) Running job, K agents: bytes per non-host node per second to / from the store host "
                  f"({args.traffic_window:.0f} s window, payload)\n")
            print("| K | rankrun up | rankrun down | torch 1.13 up | torch 1.13 down |")
            print("|---|---|---|---|---|")
            cell = lambda v, i: f"{v[i]:.1f}" if v else "-"
            for r in rows:
                t = r.get("torch")
                print(f"| {r['k']} | {cell(r['rankrun'], 0)} | {cell(r['rankrun'], 1)} | {cell(t, 0)} | {cell(t, 1)} |")
            if torch:
                print("\ntorch 1.13's rendezvous state blob (base64 of the pickled _RendezvousState, round complete, "
                      "N participants with heartbeats; addresses 10.0.x.y):\n")
                print("| N | blob bytes |")
                print("|---|---|")
                for n, size in torch_state_sizes([2, 8, 64, 512, 2048]):
                    print(f"| {n} | {size} |")
            sys.stdout.flush()
    finally:
        left = kill_leftovers(tmp)
        print(f"\nleftover processes after the run: {len(left)}")
        if args.keep_logs:
            print(f"logs: {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
