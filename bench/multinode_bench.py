#!/usr/bin/env python3
"""Multi-node benchmarks: nodes are network namespaces on this machine (the rig of
tests/integration/netns.py, under names of our own: namespaces `rrmb-*`, subnet 10.214.X.0/24),
node 0 hosts the store, every launcher runs under `nsenter --net=/run/netns/NS` (which keeps
the cgroup mounts) with GLOO_SOCKET_IFNAME=eth0 and its own TMPDIR (as on separate machines).

1. launch: a no-op job of 3 nodes x 2 workers, every node's launcher started at the same
   moment (t0). Each worker prints time.time() as its first statement and exits 0.
   "all running" = the latest worker start - t0; "exit" = the last launcher's exit - t0.
   rankrun against torchrun 1.13 (static rendezvous, same options as bench/launch_bench.py).
2. failure: 3 x 2 workers sleep; once all run, rank 4 (node 2, local 0) prints time.time()
   and exits 3. Time from that print to the last launcher's exit (torchrun: capped).
3. node loss: 3 x 2 sleeping workers, --node-timeout 3 and 5: SIGKILL node 1's rankrun, or
   cut node 2's cable at the switch; time from the event to each node's exit and its code.
4. traffic: 2, 3 and 5 nodes x 1 sleeping worker; eth0 bytes and packets of every host over
   a steady window (`ip -n NS -s link`): what the node links cost per node.

Every cell: median (min-max) over the runs. Needs root and `ip netns`. Everything the script
starts is killed by pid and every namespace it made is deleted, also on failure or Ctrl-C;
leftovers found after a run are reported (and killed).
"""
import argparse
import contextlib
import json
import os
import re
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from benchlib import PY, ROOT, built, fmt, import_netns, log, port_counter, sigterm_as_interrupt

netns = import_netns()

# Our own names, subnet and subnet locks (the module reads these globals at run time).
netns.PREFIX = "rrmb-"
netns.NET_BASE = "10.214"
netns.LOCK_DIR = Path("/tmp/rrmb-nets")

RANKRUN = None  # set by main() from --build-dir
WORKER_PATH = None  # the worker script, written by main()
TORCHRUN = "/usr/bin/torchrun"
START = re.compile(r"start rank=(\d+) t=([0-9.]+)")
FAILED = re.compile(r"fail rank=(\d+) t=([0-9.]+)")
NODE_LOST, STORE_LOST = 122, 123

WORKER = r'''
import os, sys, time
t = time.time()
rank = int(os.environ["RANK"])
print(f"start rank={rank} t={t:.6f}", flush=True)
mode = os.environ.get("BENCH_MODE", "noop")
if mode == "noop":
    sys.exit(0)
if mode == "fail" and rank == int(os.environ["FAIL_RANK"]):
    while not os.path.exists(os.environ["FAIL_FILE"]):
        time.sleep(0.02)
    print(f"fail rank={rank} t={time.time():.6f}", flush=True)
    sys.exit(3)
time.sleep(float(os.environ.get("SLEEP", "300")))
'''

notes = []  # odd things seen, printed at the end


def note(msg):
    notes.append(msg)
    log("NOTE: " + msg)


def tail(text, n=15):
    return "\n".join(text.splitlines()[-n:])


# --- the rig -----------------------------------------------------------------------------------
@contextlib.contextmanager
def rig_of(n):
    rig = netns.Rig(n)
    rig.up()
    try:
        yield rig
    finally:
        left = rig.leftovers()
        stuck = rig.down()
        for ns, procs in left.items():
            note(f"{ns}: process(es) still running at teardown (killed): {procs}")
        if stuck:
            note(f"{rig.name}: could not kill {stuck}")


class Launcher:
    """One node's launcher: the rig's Proc plus a thread that stamps its exit with time.time()."""

    def __init__(self, proc, node):
        self.proc, self.node = proc, node
        self.exit_t = None
        self.thread = threading.Thread(target=self._wait, daemon=True)
        self.thread.start()

    def _wait(self):
        self.proc.popen.wait()
        self.exit_t = time.time()

    @property
    def rc(self):
        return self.proc.popen.returncode if self.exit_t is not None else None

    def join(self, deadline):
        self.thread.join(max(0.0, deadline - time.time()))
        return self.exit_t is not None

    def starts(self):
        return {int(m.group(1)): float(m.group(2)) for m in START.finditer(self.proc.stdout)}


def start_job(rig, kind, nnodes, nproc, port, tmp, env, node_timeout=None, term_timeout=2):
    """Every node's launcher, node 0 first; returns (t0, [Launcher])."""
    master = rig.host(0).addr
    argv = []
    for r in range(nnodes):
        d = tmp / f"{kind}-p{port}-n{r}"
        d.mkdir(parents=True)
        if kind == "rankrun":
            a = [RANKRUN, f"--nnodes={nnodes}", f"--node-rank={r}", f"--master-addr={master}", f"--master-port={port}",
                 f"--nproc-per-node={nproc}", f"--term-timeout={term_timeout}"]
            if node_timeout is not None:
                a.append(f"--node-timeout={node_timeout:g}")
        else:  # torchrun 1.13: underscores only; the workarounds of bench/launch_bench.py
            a = [TORCHRUN, f"--nnodes={nnodes}", f"--node_rank={r}", f"--master_addr={master}",
                 f"--master_port={port}", f"--nproc_per_node={nproc}", "--redirects", "9:0", "--tee", "9:0",
                 "--monitor_interval", "0.1", "--log_dir", str(d / "logs")]
        argv.append((a + [str(WORKER_PATH)], dict(env, TMPDIR=str(d), PYTHON_EXEC=PY)))
    t0 = time.time()
    launchers = [Launcher(rig.host(r).popen(a, env=e, nsenter=True), r) for r, (a, e) in enumerate(argv)]
    for launcher, r in zip(launchers, range(nnodes)):
        launcher.tmpdir = tmp / f"{kind}-p{port}-n{r}"
    return t0, launchers


def wait_started(launchers, count, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if sum(len(l.starts()) for l in launchers) >= count:
            return True
        if all(l.exit_t is not None for l in launchers):
            time.sleep(0.2)  # let the pumps drain
            return sum(len(l.starts()) for l in launchers) >= count
        time.sleep(0.01)
    return False


def stop_job(rig, launchers, what):
    """Whatever still runs: SIGTERM the launchers, then every process of the rig's hosts by pid."""
    for l in launchers:
        if l.exit_t is None:
            l.proc.signal(signal.SIGTERM)
    deadline = time.time() + 10
    for l in launchers:
        l.join(deadline)
    for i in range(len(rig.hosts)):
        left = [p for p in rig.pids(i)]
        if left:
            netns.kill_all(left)
    for l in launchers:
        l.join(time.time() + 5)


def check_clean(rig, launchers, what, timeout=10):
    """After a run: no process left in any host, no run directory left in a node's TMPDIR."""
    for i in range(len(rig.hosts)):
        left = rig.wait_empty(i, timeout=timeout)
        if left:
            note(f"{what}: host {i} still runs {left} {timeout} s after the job ended (killed)")
            netns.kill_all(rig.pids(i))
    for l in launchers:
        d = getattr(l, "tmpdir", None)
        if d and d.exists():
            stray = [p.name for p in d.iterdir() if p.name != "logs"]
            if stray:
                note(f"{what}: node {l.node}'s TMPDIR keeps {stray}")


def straggler(launchers, since, what):
    """Note a launcher that exits over half a second after every other one."""
    exits = sorted((l.exit_t, l.node) for l in launchers if l.exit_t is not None)
    if len(exits) >= 2 and exits[-1][0] - exits[-2][0] > 0.5:
        note(f"{what}: node {exits[-1][1]} exited {exits[-1][0] - exits[-2][0]:.2f} s after the other nodes "
             f"(exits {[round((l.exit_t - since) * 1000) for l in launchers]} ms)")


def describe(launchers, since):
    parts = []
    for l in launchers:
        el = "running" if l.exit_t is None else f"{l.exit_t - since:.2f}s"
        parts.append(f"--- node {l.node}: rc={l.rc} at {el}\n{tail(l.proc.stderr, 12)}")
    return "\n".join(parts)


next_port = port_counter(29600)


# --- 1. launch ---------------------------------------------------------------------------------
def bench_launch(rig, kind, runs, tmp, env, warmup=True):
    nnodes, nproc = 3, 2
    running, exited = [], []
    for i in range(runs + (1 if warmup else 0)):
        t0, ls = start_job(rig, kind, nnodes, nproc, next_port(), tmp, dict(env, BENCH_MODE="noop"))
        deadline = t0 + 60
        ok = all(l.join(deadline) for l in ls)
        time.sleep(0.05)
        for l in ls:
            for t in l.proc.threads:
                t.join(2)
        starts = {}
        for l in ls:
            starts.update(l.starts())
        what = f"launch {kind} run {i}"
        if not ok or any(l.rc != 0 for l in ls) or len(starts) != nnodes * nproc:
            note(f"{what}: rcs {[l.rc for l in ls]}, {len(starts)} workers started\n{describe(ls, t0)}")
            stop_job(rig, ls, what)
            continue
        check_clean(rig, ls, what)
        if warmup and i == 0:
            continue
        running.append(max(starts.values()) - t0)
        exited.append(max(l.exit_t for l in ls) - t0)
        log(f"{what}: all running {running[-1] * 1000:.0f} ms, exit {exited[-1] * 1000:.0f} ms "
            f"(per node {[round((l.exit_t - t0) * 1000) for l in ls]} ms)")
        if kind == "rankrun":
            straggler(ls, t0, what)
    return running, exited


# --- 2. failure --------------------------------------------------------------------------------
def bench_failure(rig, kind, runs, tmp, env, cap):
    nnodes, nproc = 3, 2
    results = []  # (seconds or None, rcs, per-node seconds)
    for i in range(runs):
        trigger = tmp / f"fail-{kind}-{i}"
        t0, ls = start_job(rig, kind, nnodes, nproc, next_port(), tmp,
                           dict(env, BENCH_MODE="fail", FAIL_RANK=4, FAIL_FILE=trigger, SLEEP=300), term_timeout=2)
        what = f"failure {kind} run {i}"
        if not wait_started(ls, nnodes * nproc, 60):
            note(f"{what}: not every worker started\n{describe(ls, t0)}")
            stop_job(rig, ls, what)
            continue
        time.sleep(0.3)
        trigger.touch()
        deadline = time.time() + cap + 1
        tfail = None
        while tfail is None and time.time() < deadline:
            m = FAILED.search(ls[2].proc.stdout)
            tfail = float(m.group(2)) if m else None
            time.sleep(0.01)
        if tfail is None:
            note(f"{what}: rank 4 never printed its failure line\n{describe(ls, t0)}")
            stop_job(rig, ls, what)
            continue
        all_out = all(l.join(tfail + cap) for l in ls)
        rcs = [l.rc for l in ls]
        per_node = [None if l.exit_t is None else l.exit_t - tfail for l in ls]
        if all_out:
            results.append((max(per_node), rcs, per_node, {}))
            log(f"{what}: last exit {max(per_node) * 1000:.0f} ms after the failure; rcs {rcs}; "
                f"per node {[round(p * 1000) for p in per_node]} ms")
            if kind == "rankrun" and rcs != [3, 3, 3]:
                note(f"{what}: exit codes {rcs}, expected [3, 3, 3]\n{describe(ls, tfail)}")
            if kind == "rankrun":
                straggler(ls, tfail, what)
            check_clean(rig, ls, what)
        else:
            left = {i: [netns._describe(p) for p in rig.pids(i)] for i in range(nnodes)}
            results.append((None, rcs, per_node, {i: len(v) for i, v in left.items()}))
            log(f"{what}: not every node exited within {cap} s: rcs {rcs}, per node "
                f"{[None if p is None else round(p, 2) for p in per_node]}; processes still running: {left}")
            for l in ls:
                log(f"node {l.node} stderr:\n{tail(l.proc.stderr, 8)}")
            if kind == "rankrun":
                note(f"{what}: not every node exited within {cap} s\n{describe(ls, tfail)}")
            stop_job(rig, ls, what)
            check_clean(rig, ls, what)
    return results


# --- 3. node loss ------------------------------------------------------------------------------
def bench_node_loss(rig, event, node_timeout, runs, tmp, env):
    """event 'kill': SIGKILL node 1's rankrun; 'cut': node 2's cable down at the switch."""
    nnodes, nproc = 3, 2
    victim = 1 if event == "kill" else 2
    expected = {0: NODE_LOST, 1: NODE_LOST, 2: NODE_LOST}
    expected[victim] = -signal.SIGKILL if event == "kill" else STORE_LOST
    out = {"survivors": [], "victim": [], "rcs": [], "workers_gone": []}
    for i in range(runs):
        t0, ls = start_job(rig, "rankrun", nnodes, nproc, next_port(), tmp, dict(env, BENCH_MODE="sleep", SLEEP=300),
                           node_timeout=node_timeout, term_timeout=2)
        what = f"node loss {event} --node-timeout={node_timeout} run {i}"
        if not wait_started(ls, nnodes * nproc, 60):
            note(f"{what}: not every worker started\n{describe(ls, t0)}")
            stop_job(rig, ls, what)
            continue
        time.sleep(0.5)
        if event == "kill":
            te = time.time()
            ls[1].proc.signal(signal.SIGKILL)
        else:
            rig.cut(2)
            te = time.time()  # once the switch port is down
        if event == "kill":  # node 1's workers must go with their launcher (the guardian)
            gone_deadline = te + 10
            while rig.pids(1) and time.time() < gone_deadline:
                time.sleep(0.005)
            if not rig.pids(1):
                out["workers_gone"].append(time.time() - te)
            else:
                note(f"{what}: node 1's processes outlive its rankrun by 10 s: "
                     f"{[netns._describe(p) for p in rig.pids(1)]}")
        all_out = all(l.join(te + node_timeout + 20) for l in ls)
        rcs = [l.rc for l in ls]
        out["rcs"].append(rcs)
        if not all_out:
            note(f"{what}: not every node exited within {node_timeout + 20} s of the event\n{describe(ls, te)}")
        else:
            survivors = [l for l in ls if l.node != victim]
            out["survivors"] += [l.exit_t - te for l in survivors]
            if event == "cut":
                out["victim"].append(ls[victim].exit_t - te)
            log(f"{what}: rcs {rcs}, exits after the event {[round(l.exit_t - te, 2) for l in ls]} s")
            if rcs != [expected[n] for n in range(nnodes)]:
                note(f"{what}: exit codes {rcs}, expected {[expected[n] for n in range(nnodes)]}\n"
                     f"{describe(ls, te)}")
        if event == "cut":
            rig.plug(2)
        if not all_out:
            stop_job(rig, ls, what)
        check_clean(rig, ls, what)
    return out


# --- 4. traffic --------------------------------------------------------------------------------
def counters(rig):
    """{host index: (time, rx bytes, rx packets, tx bytes, tx packets)} of each host's eth0."""
    got = {}
    for h in rig.hosts:
        r = subprocess.run(["ip", "-n", h.ns, "-j", "-s", "link", "show", "eth0"], capture_output=True, text=True,
                           check=True)
        t = time.time()
        s = json.loads(r.stdout)[0]["stats64"]
        got[h.index] = (t, s["rx"]["bytes"], s["rx"]["packets"], s["tx"]["bytes"], s["tx"]["packets"])
    return got


def bench_traffic(nnodes, window, node_timeout, tmp, env, settle=1.0, sleep=10):
    with rig_of(nnodes) as rig:
        # A fresh veth sends IPv6 router solicitations and MLD reports for ~10 s after it comes
        # up, flooded by the bridge to every host (so they grow with the nodes): off here, so
        # that eth0 counts the job's own traffic (IPv4: the node links, and ARP).
        for ns in rig.created:
            subprocess.run(["ip", "netns", "exec", ns, "sysctl", "-q", "-w", "net.ipv6.conf.all.disable_ipv6=1",
                            "net.ipv6.conf.default.disable_ipv6=1"], check=True, capture_output=True)
        t0, ls = start_job(rig, "rankrun", nnodes, 1, next_port(), tmp, dict(env, BENCH_MODE="sleep", SLEEP=sleep),
                           node_timeout=node_timeout)
        what = f"traffic {nnodes} nodes"
        if not wait_started(ls, nnodes, 60):
            note(f"{what}: not every worker started\n{describe(ls, t0)}")
            stop_job(rig, ls, what)
            return None
        time.sleep(settle)
        a = counters(rig)
        time.sleep(window)
        b = counters(rig)
        if any(l.exit_t is not None for l in ls) or time.time() - max(max(l.starts().values()) for l in ls) > sleep - 0.5:
            note(f"{what}: the window was not inside the idle phase (a launcher exited or the workers woke up)")
        rates = {}
        for i in range(nnodes):
            dt = b[i][0] - a[i][0]
            rx_b, rx_p, tx_b, tx_p = ((b[i][k] - a[i][k]) / dt for k in range(1, 5))
            rates[i] = {"rx_B": rx_b, "rx_p": rx_p, "tx_B": tx_b, "tx_p": tx_p}
        ok = all(l.join(time.time() + sleep + 15) for l in ls)
        rcs = [l.rc for l in ls]
        if not ok or rcs != [0] * nnodes:
            note(f"{what}: exit codes {rcs}, expected all 0\n{describe(ls, t0)}")
            stop_job(rig, ls, what)
        check_clean(rig, ls, what)
        log(f"{what}: " + "; ".join(f"node {i}: tx {r['tx_B']:.0f} B/s {r['tx_p']:.1f} p/s, rx {r['rx_B']:.0f} B/s "
                                     f"{r['rx_p']:.1f} p/s" for i, r in rates.items()))
        return rates


# --- main --------------------------------------------------------------------------------------
def main():
    global RANKRUN, WORKER_PATH
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", default=str(ROOT / "build"))
    ap.add_argument("--runs", type=int, default=5, help="rankrun runs of measures 1 and 2")
    ap.add_argument("--torchrun-runs", type=int, default=3, help="torchrun runs of measure 1")
    ap.add_argument("--torchrun-fail-runs", type=int, default=1, help="torchrun runs of measure 2")
    ap.add_argument("--loss-runs", type=int, default=3, help="runs of each node-loss cell")
    ap.add_argument("--fail-cap", type=float, default=30.0, help="seconds a launcher may take to exit after a failure")
    ap.add_argument("--window", type=float, default=5.0, help="seconds of the traffic window")
    ap.add_argument("--traffic-node-timeout", type=float, default=5.0,
                    help="--node-timeout of the traffic jobs (lease interval = node timeout / 5)")
    ap.add_argument("--node-timeouts", default="3,5", help="the --node-timeout values of measure 3")
    ap.add_argument("--traffic-nodes", default="2,3,5", help="the job sizes of measure 4")
    ap.add_argument("--traffic-sleep", type=float, default=10.0,
                    help="seconds the workers of measure 4 sleep (more than 1 + --window)")
    ap.add_argument("--only", default="1,2,3,4", help="which measures to run")
    ap.add_argument("--no-torchrun", action="store_true")
    args = ap.parse_args()
    only = {int(x) for x in args.only.split(",")}
    node_timeouts = [float(x) for x in args.node_timeouts.split(",")]
    traffic_nodes = [int(x) for x in args.traffic_nodes.split(",")]
    if args.traffic_sleep <= 1 + args.window + 0.5:
        ap.error(f"--traffic-sleep {args.traffic_sleep:g} must be more than 1.5 s over --window {args.window:g}")

    reason = netns.check_available()
    if reason:  # `make bench` goes on without this one
        print(f"skipped: {reason}")
        return
    RANKRUN = built(Path(args.build_dir).resolve(), "rankrun")
    torchrun = not args.no_torchrun and os.path.exists(TORCHRUN)
    netns.sweep_stale()  # rrmb- namespaces of a run that was SIGKILLed

    sigterm_as_interrupt()
    tmp = Path(tempfile.mkdtemp(prefix="rrmb-"))
    WORKER_PATH = tmp / "worker.py"
    WORKER_PATH.write_text(WORKER)
    env = {"OMP_NUM_THREADS": "1"}
    started = time.time()
    torch_pkg = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", "python3-torch"], capture_output=True,
                               text=True).stdout or "?"
    print(f"Machine: {os.cpu_count()} cores, Linux {os.uname().release}; python3-torch {torch_pkg}; "
          f"load average at the start {os.getloadavg()[0]:.2f}\n", flush=True)
    tables = []
    try:
        if only & {1, 2}:
            with rig_of(3) as rig:
                if 1 in only:
                    rr = bench_launch(rig, "rankrun", args.runs, tmp, env)
                    tr = bench_launch(rig, "torchrun", args.torchrun_runs, tmp, env) if torchrun else None
                    t = ["### 1. No-op job, 3 nodes x 2 workers: from the launch to every worker running, and to "
                         "the last launcher's exit (ms, median (min-max))", "",
                         "| launcher | runs | all workers running | all launchers exited |", "| --- | --- | --- | --- |",
                         f"| rankrun | {len(rr[0])} | {fmt(rr[0], 1000)} | {fmt(rr[1], 1000)} |"]
                    if tr:
                        t.append(f"| torchrun 1.13 | {len(tr[0])} | {fmt(tr[0], 1000)} | {fmt(tr[1], 1000)} |")
                    tables.append("\n".join(t))
                    print(tables[-1] + "\n", flush=True)
                if 2 in only:
                    rr = bench_failure(rig, "rankrun", args.runs, tmp, env, args.fail_cap)
                    tr = bench_failure(rig, "torchrun", args.torchrun_fail_runs, tmp, env, args.fail_cap) \
                        if torchrun else None
                    t = [f"### 2. Rank 4 (node 2) exits 3, the other 5 ranks sleep: from its exit to the last "
                         f"launcher's exit (ms, median (min-max))", "",
                         "| launcher | runs | last node exited | node 0 / 1 / 2 | exit codes (node 0, 1, 2) |",
                         "| --- | --- | --- | --- | --- |"]
                    for name, res in (("rankrun --term-timeout=2", rr), ("torchrun 1.13", tr)):
                        if res is None:
                            continue
                        done = [r[0] for r in res if r[0] is not None]
                        hung = len(res) - len(done)
                        cell = fmt(done, 1000) if done else ""
                        if hung:
                            cell = (cell + "; " if cell else "") + \
                                f"did not exit within {args.fail_cap:.0f} s ({hung} of {len(res)})"
                        def node_cell(n):
                            done_n = [r[2][n] for r in res if r[2][n] is not None]
                            cell = fmt(done_n, 1000) if done_n else ""
                            hung_n = [r[3][n] for r in res if r[2][n] is None]
                            if hung_n:
                                cell += ("; " if cell else "") + (
                                    f">{args.fail_cap:.0f} s ({max(hung_n)} processes left)")
                            return cell
                        per = " / ".join(node_cell(n) for n in range(3))
                        rcs = sorted({str(r[1]) for r in res})
                        t.append(f"| {name} | {len(res)} | {cell} | {per} | {', '.join(rcs).replace('None', 'running')} |")
                    tables.append("\n".join(t))
                    print(tables[-1] + "\n", flush=True)
        if 3 in only:
            t = ["### 3. Node loss, rankrun, 3 nodes x 2 sleeping workers: from the event to the exits (s, "
                 "median (min-max))", "",
                 "| --node-timeout | event | runs | survivors exit (122) | the lost node exits | exit codes (node 0, 1, 2) |",
                 "| --- | --- | --- | --- | --- | --- |"]
            with rig_of(3) as rig:
                for nt in node_timeouts:
                    for event in ("kill", "cut"):
                        r = bench_node_loss(rig, event, nt, args.loss_runs, tmp, env)
                        if event == "kill":
                            ev = "SIGKILL node 1's rankrun"
                            victim = (f"its workers gone after {fmt(r['workers_gone'], 1, 2)}"
                                      if r["workers_gone"] else "its workers outlive it")
                        else:
                            ev = "node 2's cable cut"
                            victim = f"{fmt(r['victim'], 1, 2)} (123)"
                        rcs = ", ".join(sorted({str(x) for x in r["rcs"]})).replace("None", "running")
                        t.append(f"| {nt:g} | {ev} | {len(r['rcs'])} | {fmt(r['survivors'], 1, 2)} | {victim} | {rcs} |")
            tables.append("\n".join(t))
            print(tables[-1] + "\n", flush=True)
        if 4 in only:
            t = [f"### 4. Idle job, 1 sleeping worker per node, --node-timeout={args.traffic_node_timeout:g}: eth0 "
                 f"traffic per node over {args.window:g} s (tx + rx; other nodes: median (min-max) over them)", "",
                 "| nodes | other nodes B/s | other nodes packets/s | node 0 B/s | node 0 packets/s | "
                 "node 0 B/s per other node |", "| --- | --- | --- | --- | --- | --- |"]
            for n in traffic_nodes:
                rates = bench_traffic(n, args.window, args.traffic_node_timeout, tmp, env, sleep=args.traffic_sleep)
                if rates is None:
                    t.append(f"| {n} | failed | | | | |")
                    continue
                tot = {i: (r["tx_B"] + r["rx_B"], r["tx_p"] + r["rx_p"]) for i, r in rates.items()}
                others = [tot[i] for i in range(1, n)]
                t.append(f"| {n} | {fmt([o[0] for o in others])} | {fmt([o[1] for o in others], 1, 1)} | "
                         f"{tot[0][0]:.0f} | {tot[0][1]:.1f} | {tot[0][0] / (n - 1):.0f} |")
            tables.append("\n".join(t))
            print(tables[-1] + "\n", flush=True)
    except KeyboardInterrupt:
        log("interrupted; cleaning up")
    finally:
        left = [ns for ns in netns.list_namespaces() if ns.startswith(f"{netns.PREFIX}mp{os.getpid()}c")]
        for ns in left:
            note(f"namespace {ns} left behind; removing")
            netns.kill_all(netns.ns_pids(ns))
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        subprocess.run(["rm", "-rf", str(tmp)])
    log(f"total {time.time() - started:.0f} s; load average at the end: {os.getloadavg()}")
    if notes:
        print("Notes:\n" + "\n".join(f"- {n}" for n in notes))


if __name__ == "__main__":
    main()
