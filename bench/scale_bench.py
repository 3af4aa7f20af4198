#!/usr/bin/env python3
"""Scale benchmark: jobs of up to 256 nodes on one machine, one native worker per node.

Each node is a network namespace (namespaces `rrms-p<pid>-h<i>`, subnet 10.215.0.0/16, host i
at 10.215.<i // 250>.<i % 250 + 1>: the /24 of tests/integration/netns.py holds at most 253
hosts), every host's `eth0` a veth whose peer is a port of bridge `br0` in a "switch" namespace
`rrms-p<pid>-sw`; nothing is attached to the root namespace. One rig of the largest N is built
once and the jobs of every N run on its first N hosts. IPv6 address generation is off on every
link (`addrgenmode none`): a fresh veth would otherwise send router solicitations and MLD
reports for ~10 s, which the bridge floods to every port (N² frames).

Every node's rankrun runs under `nsenter --net=/run/netns/NS` (which keeps the cgroup mounts)
with its own TMPDIR, its stdout going to a file of the run's directory and its stderr through
one reader thread that stamps each line with its arrival (seconds after t0) into node<R>.err.
All N launchers are started behind a gate (`sh -c 'read _ <&3; exec rankrun ...'`: each waits
on one pipe) and released together by writing N lines to that pipe; t0 is the moment of that
write. Their exits are stamped by one thread polling their pidfds. Before the release, the
cores other work keeps busy are measured over 0.3 s (/proc/stat): the "busy cores" column.
Node 0's rankrun is sampled every 20 ms (VmRSS, VmHWM, utime+stime, and each thread's state,
CPU and wchan into node0.threads); `--perf-node0` records it with perf, `--node0-prefix CMD`
runs it under CMD (heaptrack, nice): diagnoses, not measures.

The worker is a bash script (`--no-python`): it writes `$RANK $EPOCHREALTIME` to
`s.<WORLD_SIZE>.<node>` in the run's directory as its first statement, then exits 0, exits 3
when told to, or `exec sleep`s. No fork before the stamp; bash's start is part of the time.

Measures, per N (static: `--nnodes=N --node-rank=R --master-addr=<host 0> --master-port=P
--nproc-per-node=1 --no-python`; elastic: `--nnodes=N/2:N --rdzv-backend=c10d
--rdzv-endpoint=<host 0>:P`):

  success  workers exit 0 at once: t0 -> every worker started ("all running"), t0 -> every
           launcher exited, and the last worker's exit stamp -> the last launcher's exit;
           node 0's VmHWM and CPU time at its last sample; every launcher's CPU (its own and
           its reaped children's: worker, guardian) from wait4.
  fail     workers sleep; once all run, the rank of the last node exits 3: its exit stamp ->
           every launcher exited. Every launcher must exit 3. Node 0's VmRSS 0.3 s after all
           run; the launchers' CPU until then (each process tree's schedstat) and after.
  kill     workers sleep, --node-timeout K (default 3): SIGKILL the middle node's rankrun;
           -> every survivor exited. Every survivor must exit 122.
  elastic  c10d, --node-timeout K: t0 -> round 0's workers (WORLD_SIZE=N) running on every node;
           then SIGKILL the last node's rankrun -> round 1's workers (WORLD_SIZE=N-1) running
           on every survivor; they exit 0, and every survivor must exit 0.

Every launcher's exit code is checked in every run; a run in which one did not exit within the
cap, or exited with another code, is reported with the paths of the launchers' logs and the tail
of the stderr of those involved (those logs are kept; a passing run's are deleted unless
--keep-logs). `--hang-check K` adds K success runs at the largest N and counts the runs that did
not end right. Everything the script starts is killed by pid (never by name) and every namespace
it made is deleted, also on failure or Ctrl-C. RLIMIT_NOFILE is raised to its hard limit when
the soft one is lower (said at the start). Needs root and `ip netns`.
"""
import argparse
import fcntl
import os
import re
import select
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import json
import resource
from pathlib import Path

from benchlib import ROOT, built, fmt, import_netns, port_counter, proc_stat, proc_status, raise_nofile, \
    sigterm_as_interrupt

netns = import_netns()  # its helpers: _ip, kill_all, _alive, _describe, list_namespaces, check_available

PREFIX = "rrms-"
NET = "10.215"
CLK_TCK = os.sysconf("SC_CLK_TCK")
NODE_LOST = 122
F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)
STAMP = re.compile(r"^s\.(\d+)\.(\d+)$")

WORKER = r"""#!/bin/bash
# One node's worker: stamp first, then what BENCH_MODE says.
t=$EPOCHREALTIME
printf '%s %s\n' "$RANK" "$t" > "$BENCH_DIR/s.$WORLD_SIZE.$BENCH_NODE"
case "$BENCH_MODE" in
  noop)
    printf '%s\n' "$EPOCHREALTIME" > "$BENCH_DIR/e.$BENCH_NODE"
    exit 0 ;;
  fail)
    if [ "$RANK" = "$FAIL_RANK" ]; then
      while [ ! -e "$BENCH_DIR/trigger" ]; do sleep 0.02; done
      printf '%s\n' "$EPOCHREALTIME" > "$BENCH_DIR/failed"
      exit 3
    fi ;;
  elastic)
    [ "$WORLD_SIZE" = "$ELASTIC_N" ] || exit 0 ;;
esac
exec sleep 600
"""

notes = []
RANKRUN = None
WORKER_PATH = None
EXTRA_ARGS = []  # --launcher-arg
PERF_NODE0 = False  # --perf-node0
NODE0_PREFIX = []  # --node0-prefix


def log(msg):
    print(f"# [{time.strftime('%H:%M:%S')} load {os.getloadavg()[0]:.1f}] {msg}", file=sys.stderr, flush=True)


def note(msg):
    notes.append(msg)
    log("PROBLEM: " + msg)


def tail(path, n=12):
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-n:])
    except OSError as e:
        return f"({e})"


# --- the rig -----------------------------------------------------------------------------------
def ip_batch(lines, ns=None, timeout=120):
    args = ["ip"] + (["-n", ns] if ns else []) + ["-batch", "-"]
    r = subprocess.run(args, input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: {r.stderr.strip()[:2000]}")


def ns_inode(ns):
    try:
        return os.stat(f"/run/netns/{ns}").st_ino
    except OSError:
        return None


def net_ns_of(pid):
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return None


class ScaleRig:
    """n hosts on one bridge, as netns.Rig but on a /16 and built with `ip -batch`."""

    def __init__(self, n):
        if not 1 <= n <= 1000:  # the bridge takes 1024 ports; a /16 holds far more
            raise ValueError(n)
        self.n = n
        self.name = f"{PREFIX}p{os.getpid()}"
        self.switch = f"{self.name}-sw"
        self.hosts = [f"{self.name}-h{i}" for i in range(n)]
        self.created = []
        self.inodes = {}  # nsfs inode -> host index (-1: the switch)

    @staticmethod
    def addr(i):
        return f"{NET}.{i // 250}.{i % 250 + 1}"

    def up(self):
        t = time.monotonic()
        for chunk in range(0, self.n + 1, 64):
            names = ([self.switch] + self.hosts)[chunk:chunk + 64]
            self.created += names  # before the batch: a partial batch is cleaned up too
            ip_batch([f"netns add {ns}" for ns in names])
        sw = ["link set lo up", "link add br0 type bridge", "link set br0 addrgenmode none", "link set br0 up"]
        for i, ns in enumerate(self.hosts):
            sw += [f"link add h{i} type veth peer name eth0 netns {ns}", f"link set h{i} addrgenmode none",
                   f"link set h{i} master br0", f"link set h{i} up"]
        ip_batch(sw, ns=self.switch)
        for i, ns in enumerate(self.hosts):
            ip_batch(["link set lo up", "link set eth0 addrgenmode none", f"addr add {self.addr(i)}/16 dev eth0",
                      "link set eth0 up"], ns=ns)
        self.inodes = {ns_inode(self.switch): -1}
        self.inodes.update({ns_inode(ns): i for i, ns in enumerate(self.hosts)})
        deadline = time.monotonic() + 30
        while True:
            r = subprocess.run(["ip", "-n", self.switch, "-j", "-d", "link", "show", "master", "br0"],
                               capture_output=True, text=True, check=True)
            ports = json.loads(r.stdout or "[]")
            ready = sum(1 for p in ports if p.get("operstate") == "UP"
                        and p.get("linkinfo", {}).get("info_slave_data", {}).get("state") == "forwarding")
            if ready == self.n:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {ready} of {self.n} switch ports forwarding after 30 s")
            time.sleep(0.1)
        return time.monotonic() - t

    def pids(self):
        """{host index (-1: switch): [live pids]} of every process in our namespaces (one /proc scan)."""
        found = {}
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            ino = net_ns_of(d)
            if ino in self.inodes and netns._alive(int(d)):
                found.setdefault(self.inodes[ino], []).append(int(d))
        return found

    def down(self):
        stuck = []
        if self.inodes:
            every = [p for ps in self.pids().values() for p in ps]
            stuck = netns.kill_all(every)
        names = list(reversed(self.created))  # hosts before the switch
        for chunk in range(0, len(names), 64):
            try:
                ip_batch([f"netns del {ns}" for ns in names[chunk:chunk + 64]])
            except RuntimeError:  # one by one, so one failure does not keep the others
                for ns in names[chunk:chunk + 64]:
                    subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        self.created = []
        return stuck


def sweep_stale():
    """rrms- namespaces of a run that was SIGKILLed (its pid gone): kill what is inside, delete."""
    for ns in netns.list_namespaces():
        m = re.match(rf"^{PREFIX}p(\d+)-(sw|h\d+)$", ns)
        if not m or Path(f"/proc/{m.group(1)}").exists():
            continue
        ino = ns_inode(ns)
        pids = [int(d) for d in os.listdir("/proc") if d.isdigit() and net_ns_of(d) == ino]
        netns.kill_all(pids)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


# --- a job -------------------------------------------------------------------------------------
def cpu_times():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return sum(v), v[3] + v[4]  # total, idle + iowait


def busy_cores(window=0.3):
    """How many cores the machine kept busy over `window` s (other people's work, before a job)."""
    t1, i1 = cpu_times()
    time.sleep(window)
    t2, i2 = cpu_times()
    return (1 - (i2 - i1) / max(1, t2 - t1)) * os.cpu_count()


class StderrPump:
    """Every launcher's stderr through one thread: each line is written to its node's file with
    the time it arrived, in seconds since the gate opened (`t0`; set when the job is released;
    negative before)."""

    def __init__(self):
        self.files = {}  # fd -> [file, partial line]
        self.t0 = None
        self.sel = None
        self.thread = None

    def add(self, fd, path):
        self.files[fd] = [open(path, "w", buffering=1), b""]  # line-buffered: read while the job runs

    def start(self, t0):
        self.t0 = t0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _emit(self, f, line, now):
        f.write(f"{now - self.t0:9.3f} {line.decode(errors='replace')}\n")

    def _run(self):
        poller = select.poll()
        for fd in self.files:
            poller.register(fd, select.POLLIN)
        left = len(self.files)
        while left:
            for fd, _ in poller.poll(1000):
                now = time.time()
                entry = self.files[fd]
                try:
                    data = os.read(fd, 65536)
                except OSError:
                    data = b""
                if not data:
                    poller.unregister(fd)
                    left -= 1
                    if entry[1]:
                        self._emit(entry[0], entry[1], now)
                    entry[0].close()
                    os.close(fd)
                    continue
                *lines, entry[1] = (entry[1] + data).split(b"\n")
                for line in lines:
                    self._emit(entry[0], line, now)

    def close(self, timeout=10):
        """After the launchers are gone (their pipes close when every holder exits)."""
        if self.thread:
            self.thread.join(timeout)
            if self.thread.is_alive():
                note("a launcher's stderr pipe stayed open after it exited (a process inherited it)")


class ExitWatch:
    """Stamps each pid's exit with time.time(), from one thread polling pidfds."""

    def __init__(self, pids):
        self.exit_t = {}
        self.fds = {}
        for p in pids:
            self.fds[os.pidfd_open(p)] = p
        self.stop = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        poller = select.poll()
        for fd in self.fds:
            poller.register(fd, select.POLLIN)
        left = len(self.fds)
        while left and not self.stop:
            for fd, _ in poller.poll(100):
                t = time.time()
                poller.unregister(fd)
                self.exit_t[self.fds[fd]] = t
                left -= 1

    def close(self):
        self.stop = True
        self.thread.join(2)
        for fd in self.fds:
            os.close(fd)
        self.fds = {}


class Sampler:
    """Node 0's rankrun from /proc every `every` s until it exits: the last VmHWM, VmRSS (KiB) and
    utime+stime (s) seen, and the largest VmRSS."""

    def __init__(self, pid, every=0.02, trace=None):
        self.pid, self.every = pid, every
        self.trace = trace  # a file: one line per sample with each thread's state, CPU and wchan
        self.t0 = None
        self.hwm = self.rss = self.cpu = None
        self.rss_max = 0
        self.threads = None
        self.threads_max = 0
        self.stop = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def sample(self):
        try:
            fields = proc_status(self.pid)
            stat = proc_stat(f"/proc/{self.pid}/stat")
        except OSError:
            return False
        if stat[0] == "Z":
            return False
        try:
            self.hwm = int(fields["VmHWM"].split()[0])
            self.rss = int(fields["VmRSS"].split()[0])
            self.threads = int(fields["Threads"])
        except (KeyError, ValueError):
            return False
        self.rss_max = max(self.rss_max, self.rss)
        self.threads_max = max(self.threads_max, self.threads)
        self.cpu = (int(stat[11]) + int(stat[12])) / CLK_TCK  # utime, stime (fields 14, 15)
        if self.trace and self.t0:
            self._trace()
        return True

    def _trace(self):
        """t, VmRSS (KiB), then per thread: tid:state:cpu ticks:wchan (what node 0 does while the others
        wait)."""
        parts = []
        try:
            for tid in sorted(os.listdir(f"/proc/{self.pid}/task"), key=int):
                try:
                    st = proc_stat(f"/proc/{self.pid}/task/{tid}/stat")
                    with open(f"/proc/{self.pid}/task/{tid}/wchan") as f:
                        wchan = f.read().strip() or "-"
                except OSError:
                    continue
                parts.append(f"{tid}:{st[0]}:{int(st[11]) + int(st[12])}:{wchan}")
        except OSError:
            return
        self.trace.write(f"{time.time() - self.t0:8.3f} rss={self.rss} " + " ".join(parts) + "\n")

    def _run(self):
        while not self.stop and self.sample():
            time.sleep(self.every)

    def close(self):
        self.stop = True
        self.thread.join(2)
        if self.trace:
            self.trace.close()
            self.trace = None


# A fresh port per job, below the namespaces' ephemeral range (32768-60999): node 0's own
# outgoing connections of an earlier job (its commander to its store) can hold a port there.
next_port = port_counter(20000)


class Job:
    """N launchers on the first N hosts, started behind a gate and released together."""

    def __init__(self, rig, n, mode, rundir, *, elastic=False, node_timeout=None, extra_env=None):
        self.rig, self.n, self.mode, self.dir = rig, n, mode, rundir
        self.elastic = elastic
        self.dir.mkdir(parents=True)
        port = next_port()
        master = rig.addr(0)
        gate_r, self.gate_w = os.pipe()
        self.procs = []
        self.stderr = StderrPump()
        base_env = dict(os.environ)
        base_env.pop("CUDA_VISIBLE_DEVICES", None)
        base_env.update({"GLOO_SOCKET_IFNAME": "eth0", "LC_ALL": "C", "BENCH_DIR": str(self.dir),
                         "BENCH_MODE": mode, "FAIL_RANK": str(n - 1), "ELASTIC_N": str(n)})
        base_env.update(extra_env or {})
        try:
            for r in range(n):
                tmpdir = self.dir / f"tmp{r}"
                tmpdir.mkdir()
                if elastic:
                    a = [RANKRUN, f"--nnodes={max(1, n // 2)}:{n}", "--rdzv-backend=c10d",
                         f"--rdzv-endpoint={master}:{port}", f"--rdzv-id=scale{port}"]
                else:
                    a = [RANKRUN, f"--nnodes={n}", f"--node-rank={r}", f"--master-addr={master}",
                         f"--master-port={port}"]
                a += ["--nproc-per-node=1", "--term-timeout=2", "--no-python"]
                if node_timeout is not None:
                    a.append(f"--node-timeout={node_timeout}")
                a += EXTRA_ARGS + [str(WORKER_PATH)]
                env = dict(base_env, TMPDIR=str(tmpdir), BENCH_NODE=str(r))
                err_r, err_w = os.pipe()
                try:  # room for a burst (node 0's summary at 256 nodes is ~40 KB) while the pump is slow
                    fcntl.fcntl(err_r, F_SETPIPE_SZ, 1 << 20)
                except OSError:
                    pass
                try:
                    with open(self.dir / f"node{r}.out", "wb") as out:
                        p = subprocess.Popen(["nsenter", f"--net=/run/netns/{rig.hosts[r]}", "/bin/sh", "-c",
                                              'read _ <&3; exec "$@" 3<&-', "gate"]
                                             + (NODE0_PREFIX if r == 0 else []) + a,
                                             stdin=subprocess.DEVNULL, stdout=out, stderr=err_w, env=env,
                                             pass_fds=(gate_r,))
                except BaseException:
                    os.close(err_r)
                    raise
                finally:
                    os.close(err_w)
                self.procs.append(p)
                self.stderr.add(err_r, self.dir / f"node{r}.err")
        finally:
            os.close(gate_r)
        self.pids = [p.pid for p in self.procs]
        self.cpu = {}
        self.watch = ExitWatch(self.pids)
        self.sampler = None
        self.gated = self._wait_gated(10)
        if self.gated < n:
            note(f"{self.dir.name}: only {self.gated} of {n} launchers waiting at the gate after 10 s; released anyway")
        self.sampler = Sampler(self.pids[0], trace=open(self.dir / "node0.threads", "w"))
        self.perf = None
        if PERF_NODE0:
            self.perf = subprocess.Popen(["perf", "record", "-q", "--call-graph", "dwarf,16384", "-F", "499", "-p",
                                          str(self.pids[0]), "-o", str(self.dir / "node0.perf")],
                                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(1.0)  # attached before the release
        self.load = busy_cores()
        self.t0 = time.time()
        self.sampler.t0 = self.t0
        (self.dir / "t0").write_text(f"{self.t0:.6f}\n")
        self.stderr.start(self.t0)
        os.write(self.gate_w, b"\n" * n)
        os.close(self.gate_w)
        self.gate_w = None

    def _wait_gated(self, timeout):
        deadline = time.monotonic() + timeout
        while True:
            ready = 0
            for pid in self.pids:
                try:
                    with open(f"/proc/{pid}/comm") as f:
                        comm = f.read().strip()
                    with open(f"/proc/{pid}/wchan") as f:
                        wchan = f.read()
                except OSError:
                    continue
                if comm == "sh" and "pipe" in wchan:
                    ready += 1
            if ready == len(self.pids) or time.monotonic() > deadline:
                return ready
            time.sleep(0.01)

    # what the workers wrote
    def starts(self, world):
        """{node: stamp} of the workers that ran with WORLD_SIZE=world."""
        got = {}
        for name in os.listdir(self.dir):
            m = STAMP.match(name)
            if m and int(m.group(1)) == world:
                try:
                    got[int(m.group(2))] = float((self.dir / name).read_text().split()[1])
                except (OSError, IndexError, ValueError):
                    pass  # being written
        return got

    def stamp(self, name):
        try:
            return float((self.dir / name).read_text().split()[0])
        except (OSError, IndexError, ValueError):
            return None

    def worker_exits(self):
        return [float(p.read_text().split()[0]) for p in self.dir.glob("e.*")]

    def wait_starts(self, world, count, deadline):
        while time.time() < deadline:
            if len(self.starts(world)) >= count:
                return True
            if all(p in self.watch.exit_t for p in self.pids):
                return len(self.starts(world)) >= count
            time.sleep(0.02)
        return False

    def wait_exits(self, which, deadline):
        while time.time() < deadline:
            if all(self.pids[r] in self.watch.exit_t for r in which):
                return True
            time.sleep(0.02)
        return all(self.pids[r] in self.watch.exit_t for r in which)

    def exit_t(self, r):
        return self.watch.exit_t.get(self.pids[r])

    def rcs(self):
        """Exit code per node (None: still running); reaps those that exited, keeping each one's
        CPU time (its own and its reaped children's: the workers, the guardian) in self.cpu."""
        out = []
        for r, p in enumerate(self.procs):
            if self.exit_t(r) is None:
                out.append(None)
                continue
            if p.returncode is None:
                try:
                    pid, status, ru = os.wait4(p.pid, 0)
                    p.returncode = os.waitstatus_to_exitcode(status)
                    self.cpu[r] = ru.ru_utime + ru.ru_stime
                except ChildProcessError:
                    p.wait(5)
            out.append(p.returncode)
        return out

    def cpu_now(self):
        """CPU time (s) the launchers and all their descendants (workers, guardians) have used so
        far: utime+stime+cutime+cstime of each process of their trees, from /proc."""
        def tree(pid):
            # Each thread's time on the CPU in ns (/proc/.../schedstat): utime and stime are
            # whole clock ticks (10 ms), too coarse for a few ms per process.
            try:
                used = 0.0
                for tid in os.listdir(f"/proc/{pid}/task"):
                    with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                        used += int(f.read().split()[0]) / 1e9
                st = proc_stat(f"/proc/{pid}/stat")
                used += (int(st[13]) + int(st[14])) / CLK_TCK  # children already reaped
                with open(f"/proc/{pid}/task/{pid}/children") as f:
                    kids = [int(k) for k in f.read().split()]
            except (OSError, IndexError, ValueError):
                return 0.0
            return used + sum(tree(k) for k in kids)
        return sum(tree(pid) for pid in self.pids)

    def cpu_total(self):
        """Every launcher's CPU for the whole job, once all exited and were reaped (else None)."""
        return sum(self.cpu.values()) if len(self.cpu) == self.n else None

    def kill(self, r):
        self.procs[r].send_signal(signal.SIGKILL)
        return time.time()

    def finish(self):
        """Whatever still runs: SIGTERM the launchers (by pid), then SIGKILL; then every process
        left in the rig's first n hosts. Returns the leftovers found (killed)."""
        running = [p for r, p in enumerate(self.procs) if self.exit_t(r) is None and p.poll() is None]
        for p in running:
            p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 10
        for p in running:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
        for p in self.procs:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                note(f"{self.dir.name}: launcher pid {p.pid} survives SIGKILL")
        if self.sampler:
            self.sampler.close()
        if self.perf:  # it ends with the process it follows
            try:
                self.perf.wait(30)
            except subprocess.TimeoutExpired:
                self.perf.send_signal(signal.SIGINT)
                self.perf.wait(10)
        self.watch.close()
        self.stderr.close()
        # Workers and guardians of launchers that exited: gone within a few seconds.
        deadline = time.monotonic() + 5
        left = {}
        while True:
            left = {h: ps for h, ps in self.rig.pids().items() if h >= 0}
            if not left or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        if left:
            netns.kill_all([p for ps in left.values() for p in ps])
        return left

    def tmp_left(self):
        stray = {}
        for r in range(self.n):
            d = self.dir / f"tmp{r}"
            things = [p.name for p in d.iterdir()] if d.exists() else []
            if things:
                stray[r] = things
        return stray


# --- the runs ----------------------------------------------------------------------------------
class Bench:
    def __init__(self, rig, tmp, args):
        self.rig, self.tmp, self.args = rig, tmp, args
        self.failed_runs = []  # (what, dir)
        self.passed_dirs = []

    def report_bad(self, job, what, expected, rcs, hung, extra=""):
        """A run that did not end right: what each launcher did, where its log is, and the stderr
        of those involved (up to 6 shown; the others are listed)."""
        wrong = [r for r in range(job.n) if rcs[r] != expected[r]]
        lines = [f"{what}: {len(hung)} launcher(s) still running at the cap, {len(wrong)} with an unexpected code "
                 f"(expected {sorted(set(map(str, expected)))}); logs: {job.dir}/node<R>.err"]
        by_rc = {}
        for r in range(job.n):
            by_rc.setdefault(str(rcs[r]).replace("None", "running"), []).append(r)
        lines.append("  codes: " + "; ".join(f"{k}: nodes {compact(v)}" for k, v in sorted(by_rc.items())))
        if extra:
            lines.append("  " + extra)
        show = ([0] if 0 not in wrong else []) + wrong[:6]
        for r in show:
            t = job.exit_t(r)
            at = "running" if t is None else f"exited at t0+{t - job.t0:.3f} s"
            lines.append(f"  --- node {r} (rc {rcs[r]}, {at}): {job.dir}/node{r}.err, last lines:\n"
                         + "\n".join("      " + l for l in tail(job.dir / f"node{r}.err", 15).splitlines()))
        note("\n".join(lines))
        self.failed_runs.append((what, job.dir))

    def done(self, job, what, ok):
        left = job.finish()
        if left:
            note(f"{what}: processes left in hosts {compact(sorted(left))} 5 s after the launchers exited (killed): "
                 + "; ".join(netns._describe(p) for ps in list(left.values())[:3] for p in ps[:2]))
            ok = False
        stray = job.tmp_left()
        if stray:
            note(f"{what}: run directories left in {len(stray)} nodes' TMPDIR, e.g. node "
                 f"{next(iter(stray))}: {next(iter(stray.values()))}")
            ok = False
        if ok:
            self.passed_dirs.append(job.dir)
        elif all(job.dir != d for _, d in self.failed_runs):
            self.failed_runs.append((what, job.dir))
        return ok

    def rundir(self, what):
        return self.tmp / what.replace(" ", "-").replace("/", "")

    # success: launch -> all running -> all exited
    def success(self, n, i, cap=None):
        what = f"N={n} success run {i}"
        cap = cap or self.args.cap
        job = Job(self.rig, n, "noop", self.rundir(what))
        ok = job.wait_exits(range(n), job.t0 + cap)
        rcs = job.rcs()
        starts = job.starts(n)
        hung = [r for r in range(n) if rcs[r] is None]
        res = None
        if not ok or any(rc != 0 for rc in rcs) or len(starts) != n:
            self.report_bad(job, what, [0] * n, rcs, hung,
                            extra=f"{len(starts)} of {n} workers started")
        else:
            exits = [job.exit_t(r) for r in range(n)]
            wexit = max(job.worker_exits() or [max(starts.values())])
            s = job.sampler
            s.close()
            res = {"load": job.load, "running": max(starts.values()) - job.t0, "exited": max(exits) - job.t0,
                   "after_last_worker": max(exits) - wexit, "spread": max(exits) - min(exits),
                   "hwm": s.hwm, "rss_max": s.rss_max, "cpu": s.cpu, "threads": s.threads_max,
                   "slowest": max(range(n), key=lambda r: exits[r]), "cpu_all": job.cpu_total() / n}
            log(f"{what}: all running {res['running']:.3f} s, all exited {res['exited']:.3f} s, "
                f"last launcher {res['after_last_worker'] * 1000:.0f} ms after the last worker "
                f"(node {res['slowest']}); node 0: VmHWM {s.hwm} KiB, CPU {s.cpu:.2f} s; every launcher's CPU "
                f"(with its workers) {res['cpu_all'] * 1000:.1f} ms per node")
        return res if self.done(job, what, res is not None) else None

    # fail: one rank exits 3 -> every launcher exits 3
    def fail(self, n, i):
        what = f"N={n} fail run {i}"
        job = Job(self.rig, n, "fail", self.rundir(what))
        res = None
        if not job.wait_starts(n, n, job.t0 + self.args.cap):
            rcs = job.rcs()
            self.report_bad(job, what, [3] * n, rcs, [r for r in range(n) if rcs[r] is None],
                            extra=f"only {len(job.starts(n))} of {n} workers started within {self.args.cap} s")
            self.done(job, what, False)
            return None
        time.sleep(0.3)
        job.sampler.sample()
        cpu_running = job.cpu_now()
        running = {"rss": job.sampler.rss, "hwm": job.sampler.hwm, "cpu": job.sampler.cpu,
                   "cpu_launch": cpu_running / n}
        (job.dir / "trigger").touch()
        tfail = None
        deadline = time.time() + 10
        while tfail is None and time.time() < deadline:
            tfail = job.stamp("failed")
            time.sleep(0.01)
        if tfail is None:
            note(f"{what}: the failing rank never wrote its stamp")
            self.done(job, what, False)
            return None
        ok = job.wait_exits(range(n), tfail + self.args.fail_cap)
        rcs = job.rcs()
        hung = [r for r in range(n) if rcs[r] is None]
        if not ok or any(rc != 3 for rc in rcs):
            self.report_bad(job, what, [3] * n, rcs, hung, extra=f"cap {self.args.fail_cap} s after the failure")
        else:
            exits = [job.exit_t(r) for r in range(n)]
            res = {"load": job.load, "stop": max(exits) - tfail, "first": min(exits) - tfail, "node0": exits[0] - tfail,
                   "slowest": max(range(n), key=lambda r: exits[r]), **running,
                   "cpu_stop": (job.cpu_total() - cpu_running) / n}
            log(f"{what}: every launcher exited 3, the last {res['stop'] * 1000:.0f} ms after the failure "
                f"(first {res['first'] * 1000:.0f} ms, node 0 {res['node0'] * 1000:.0f} ms, slowest node "
                f"{res['slowest']}); node 0 while running: VmRSS {running['rss']} KiB; every launcher's CPU "
                f"per node: {res['cpu_launch'] * 1000:.1f} ms to all running, {res['cpu_stop'] * 1000:.1f} ms "
                f"from then to its exit")
        return res if self.done(job, what, res is not None) else None

    # kill: a node's rankrun SIGKILLed -> every survivor exits 122
    def kill(self, n, i):
        nt = self.args.node_timeout
        what = f"N={n} kill run {i}"
        job = Job(self.rig, n, "sleep", self.rundir(what), node_timeout=nt)
        victim = n // 2
        if not job.wait_starts(n, n, job.t0 + self.args.cap):
            rcs = job.rcs()
            self.report_bad(job, what, [NODE_LOST] * n, rcs, [r for r in range(n) if rcs[r] is None],
                            extra=f"only {len(job.starts(n))} of {n} workers started within {self.args.cap} s")
            self.done(job, what, False)
            return None
        time.sleep(0.5)
        te = job.kill(victim)
        survivors = [r for r in range(n) if r != victim]
        ok = job.wait_exits(range(n), te + nt + self.args.fail_cap)
        rcs = job.rcs()
        expected = [NODE_LOST] * n
        expected[victim] = -signal.SIGKILL
        hung = [r for r in range(n) if rcs[r] is None]
        res = None
        if not ok or rcs != expected:
            self.report_bad(job, what, expected, rcs, hung,
                            extra=f"node {victim}'s rankrun SIGKILLed at t0+{te - job.t0:.3f} s, --node-timeout={nt}")
        else:
            exits = [job.exit_t(r) - te for r in survivors]
            res = {"load": job.load, "last": max(exits), "first": min(exits), "spread": max(exits) - min(exits)}
            log(f"{what}: every survivor exited 122, {res['first']:.2f}-{res['last']:.2f} s after the kill")
        return res if self.done(job, what, res is not None) else None

    # elastic: round 0 on every node; a node killed -> round 1 on every survivor
    def elastic(self, n, i):
        nt = self.args.node_timeout
        what = f"N={n} elastic run {i}"
        job = Job(self.rig, n, "elastic", self.rundir(what), elastic=True, node_timeout=nt)
        victim = n - 1
        expected = [0] * n
        expected[victim] = -signal.SIGKILL
        if not job.wait_starts(n, n, job.t0 + self.args.cap):
            rcs = job.rcs()
            self.report_bad(job, what, expected, rcs, [r for r in range(n) if rcs[r] is None],
                            extra=f"round 0: {len(job.starts(n))} of {n} workers started within {self.args.cap} s")
            self.done(job, what, False)
            return None
        round0 = max(job.starts(n).values()) - job.t0
        time.sleep(0.5)
        te = job.kill(victim)
        formed = job.wait_starts(n - 1, n - 1, te + nt + self.args.fail_cap)
        r1 = job.starts(n - 1)
        ok = job.wait_exits(range(n), te + nt + 2 * self.args.fail_cap)
        rcs = job.rcs()
        hung = [r for r in range(n) if rcs[r] is None]
        res = None
        if not formed or not ok or rcs != expected:
            self.report_bad(job, what, expected, rcs, hung,
                            extra=f"round 0 running at t0+{round0:.3f} s; node {victim}'s rankrun SIGKILLed at "
                                  f"t0+{te - job.t0:.3f} s (--node-timeout={nt}); round 1: {len(r1)} of {n - 1} "
                                  f"workers started")
        else:
            exits = [job.exit_t(r) for r in range(n) if r != victim]
            res = {"load": job.load, "round0": round0, "round1": max(r1.values()) - te, "exited": max(exits) - te}
            log(f"{what}: round 0 on every node at {round0:.3f} s; round 1 on every survivor {res['round1']:.2f} s "
                f"after the kill; every survivor exited 0 at {res['exited']:.2f} s")
        return res if self.done(job, what, res is not None) else None


def compact(nums):
    """[0, 1, 2, 5, 7, 8] -> '0-2, 5, 7-8'."""
    nums = sorted(nums)
    out, i = [], 0
    while i < len(nums):
        j = i
        while j + 1 < len(nums) and nums[j + 1] == nums[j] + 1:
            j += 1
        out.append(str(nums[i]) if i == j else f"{nums[i]}-{nums[j]}")
        i = j + 1
    return ", ".join(out)


def raise_nofile_for(need):
    soft, now, _ = raise_nofile()
    if soft < now:
        print(f"RLIMIT_NOFILE raised from {soft} to the hard limit {now} (the launchers inherit it)")
    if now < need:
        print(f"WARNING: RLIMIT_NOFILE {now} may be short of the {need} descriptors node 0 and this script need")


def main():
    global RANKRUN, WORKER_PATH, PERF_NODE0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", default=str(ROOT / "build"))
    ap.add_argument("--nodes", default="8,32,64,128,256", help="comma-separated node counts")
    ap.add_argument("--runs", type=int, default=3, help="runs of each measure per node count")
    ap.add_argument("--only", default="success,fail,kill,elastic", help="which measures")
    ap.add_argument("--node-timeout", type=float, default=3.0, help="--node-timeout of the kill and elastic runs")
    ap.add_argument("--cap", type=float, default=60.0, help="seconds a job may take to start (and a no-op job to end)")
    ap.add_argument("--fail-cap", type=float, default=30.0, help="seconds every launcher may take to exit after the event")
    ap.add_argument("--hang-check", type=int, default=0, metavar="K",
                    help="K more success runs at the largest node count, counting those that did not end right")
    ap.add_argument("--keep-logs", action="store_true", help="keep the logs of passing runs too")
    ap.add_argument("--perf-node0", action="store_true",
                    help="record node 0's rankrun with `perf record --call-graph dwarf` (node0.perf in each run's logs)")
    ap.add_argument("--node0-prefix", default="", metavar="CMD",
                    help="run node 0's rankrun under CMD (e.g. 'heaptrack -o /tmp/node0'); a diagnosis, not a measure")
    ap.add_argument("--launcher-arg", action="append", default=[], metavar="ARG",
                    help="one more rankrun option for every launcher (e.g. -v); may be repeated")
    args = ap.parse_args()
    nodes = [int(x) for x in args.nodes.split(",")]
    EXTRA_ARGS[:] = args.launcher_arg
    PERF_NODE0 = args.perf_node0
    NODE0_PREFIX[:] = shlex.split(args.node0_prefix)
    only = set(args.only.split(","))

    reason = netns.check_available()
    if reason:  # `make bench` goes on without this one
        print(f"skipped: {reason}")
        return 0
    RANKRUN = built(Path(args.build_dir).resolve(), "rankrun")
    if not os.access(RANKRUN, os.X_OK):
        print(f"no rankrun at {RANKRUN}")
        return 1
    raise_nofile_for(4 * max(nodes) + 256)
    sigterm_as_interrupt()
    sweep_stale()
    tmp = Path(tempfile.mkdtemp(prefix="rrms-"))
    WORKER_PATH = tmp / "worker.sh"
    WORKER_PATH.write_text(WORKER)
    WORKER_PATH.chmod(0o755)
    started = time.time()
    print(f"Machine: {os.cpu_count()} cores, Linux {os.uname().release}; load average at the start "
          f"{os.getloadavg()[0]:.2f}; RLIMIT_NOFILE {resource.getrlimit(resource.RLIMIT_NOFILE)[0]}; "
          f"fs.inotify.max_user_instances {Path('/proc/sys/fs/inotify/max_user_instances').read_text().strip()}\n",
          flush=True)
    rig = ScaleRig(max(nodes))
    results = {}
    hang = None
    interrupted = False
    try:
        setup = rig.up()
        log(f"rig of {rig.n} hosts up in {setup:.1f} s")
        bench = Bench(rig, tmp, args)
        for n in nodes:
            r = results.setdefault(n, {})
            for what in ("success", "fail", "kill", "elastic"):
                if what in only:
                    r[what] = [x for x in (getattr(bench, what)(n, i) for i in range(args.runs))]
        if args.hang_check:
            n = max(nodes)
            bad = 0
            times = []
            for i in range(args.hang_check):
                x = bench.success(n, f"h{i}")
                if x is None:
                    bad += 1
                else:
                    times.append(x["exited"])
            hang = (n, args.hang_check, bad, times)
    except KeyboardInterrupt:
        interrupted = True
        log("interrupted; cleaning up")
    finally:
        t = time.monotonic()
        stuck = rig.down()
        if stuck:
            note(f"could not kill {stuck}")
        left = [ns for ns in netns.list_namespaces() if ns.startswith(rig.name + "-")]
        if left:
            note(f"namespaces left behind: {left}")
        log(f"rig down in {time.monotonic() - t:.1f} s")
    print_tables(results, nodes, args, hang)
    failed_dirs = {d for _, d in bench.failed_runs} if 'bench' in locals() else set()
    if not args.keep_logs and 'bench' in locals():
        for d in bench.passed_dirs:
            if d not in failed_dirs:
                shutil.rmtree(d, ignore_errors=True)
    if failed_dirs:
        print("\nLogs of the runs that did not end right (kept):")
        for what, d in bench.failed_runs:
            print(f"- {what}: {d}")
    elif not args.keep_logs:
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        print(f"\nLogs: {tmp}")
    log(f"total {time.time() - started:.0f} s; load average at the end: {os.getloadavg()}")
    if notes:
        print(f"\n{len(notes)} problem(s):\n" + "\n".join(f"- {n}" for n in notes))
    return 130 if interrupted else 0


def print_tables(results, nodes, args, hang):
    def col(n, what, key):
        return [x[key] for x in results.get(n, {}).get(what, []) if x is not None and x.get(key) is not None]

    def runs(n, what):
        got = results.get(n, {}).get(what, [])
        return f"{sum(1 for x in got if x is not None)}/{len(got)}"

    def load(n, what):  # cores busy just before the runs' jobs (other people's work)
        return fmt(col(n, what, "load"), 1, 1)

    rows = []
    if "success" in args.only:
        rows += ["### Success: every worker exits 0 at once (s; median (min-max))", "",
                 "| nodes | runs ok | busy cores | launch -> all running | launch -> every launcher exited | "
                 "last worker exit -> last launcher exit | CPU per node (launcher, its workers and guardian), whole job (ms) |",
                 "| --- | --- | --- | --- | --- | --- | --- |"]
        for n in nodes:
            rows.append(f"| {n} | {runs(n, 'success')} | {load(n, 'success')} | {fmt(col(n, 'success', 'running'), 1, 2)} "
                        f"| {fmt(col(n, 'success', 'exited'), 1, 2)} | {fmt(col(n, 'success', 'after_last_worker'), 1, 2)} "
                        f"| {fmt(col(n, 'success', 'cpu_all'), 1000, 1)} |")
        rows.append("")
    if "fail" in args.only:
        rows += ["### Failure: the last node's rank exits 3 once all run -> the launchers exit 3 (s; median (min-max))",
                 "", "| nodes | runs ok | busy cores | first launcher | node 0 | last launcher | CPU per node (launcher, "
                 "its workers and guardian) until all run (ms) | from then to the exit (ms) |",
                 "| --- | --- | --- | --- | --- | --- | --- | --- |"]
        for n in nodes:
            rows.append(f"| {n} | {runs(n, 'fail')} | {load(n, 'fail')} | {fmt(col(n, 'fail', 'first'), 1, 2)} | "
                        f"{fmt(col(n, 'fail', 'node0'), 1, 2)} | {fmt(col(n, 'fail', 'stop'), 1, 2)} | "
                        f"{fmt(col(n, 'fail', 'cpu_launch'), 1000, 1)} | {fmt(col(n, 'fail', 'cpu_stop'), 1000, 1)} |")
        rows.append("")
    if "kill" in args.only:
        rows += [f"### Node lost: the middle node's rankrun SIGKILLed, --node-timeout={args.node_timeout:g} -> every "
                 f"survivor exited 122 (s; median (min-max))", "",
                 "| nodes | runs ok | busy cores | first survivor | last survivor | spread |", "| --- | --- | --- | --- | --- | --- |"]
        for n in nodes:
            rows.append(f"| {n} | {runs(n, 'kill')} | {load(n, 'kill')} | {fmt(col(n, 'kill', 'first'), 1, 2)} | "
                        f"{fmt(col(n, 'kill', 'last'), 1, 2)} | {fmt(col(n, 'kill', 'spread'), 1, 2)} |")
        rows.append("")
    if "elastic" in args.only:
        rows += [f"### Elastic (c10d, --nnodes=N/2:N, --node-timeout={args.node_timeout:g}; s, median (min-max))", "",
                 "| nodes | runs ok | busy cores | launch -> round 0 running on every node | the last node's rankrun "
                 "SIGKILLed -> round 1 running on every survivor | -> every survivor exited 0 |",
                 "| --- | --- | --- | --- | --- | --- |"]
        for n in nodes:
            rows.append(f"| {n} | {runs(n, 'elastic')} | {load(n, 'elastic')} | {fmt(col(n, 'elastic', 'round0'), 1, 2)} "
                        f"| {fmt(col(n, 'elastic', 'round1'), 1, 2)} | {fmt(col(n, 'elastic', 'exited'), 1, 2)} |")
        rows.append("")
    if "success" in args.only or "fail" in args.only:
        rows += ["### Node 0's rankrun (KiB, CPU s; median (min-max)); growth: per node added since the row above", "",
                 "| nodes | VmRSS while the job runs | its growth per node | VmHWM at exit | its growth per node | "
                 "CPU, whole no-op job | per node (ms) | threads |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
        prev = None
        for n in nodes:
            rss, hwm, cpu = col(n, "fail", "rss"), col(n, "success", "hwm"), col(n, "success", "cpu")
            r = statistics.median(rss) if rss else None
            h = statistics.median(hwm) if hwm else None
            c = statistics.median(cpu) if cpu else None

            def growth(now, i):
                return f"{(now - prev[i]) / (n - prev[0]):.1f}" if now is not None and prev and prev[i] else "-"
            rows.append(f"| {n} | {fmt(rss)} | {growth(r, 1)} | {fmt(hwm)} | {growth(h, 2)} | {fmt(cpu, 1, 2)} | "
                        f"{'-' if c is None else f'{c / n * 1000:.2f}'} | {fmt(col(n, 'success', 'threads'))} |")
            prev = (n, r, h)
        rows.append("")
    if hang:
        n, k, bad, times = hang
        rows.append(f"### No-hang check: {k} success runs at {n} nodes: {k - bad} ended with every launcher exiting 0 "
                    f"within {args.cap:g} s, {bad} did not; launch -> every launcher exited {fmt(times, 1, 2)} s\n")
    print("\n".join(rows), flush=True)


if __name__ == "__main__":
    sys.exit(main())
