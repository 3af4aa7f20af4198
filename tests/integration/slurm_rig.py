"""A real Slurm cluster on one machine for tests: munged + slurmctld + 3 slurmd, each slurmd a
"host" of its own (a network namespace), everything private to the rig.

    def test_x(slurm):                        # function fixture over one module-scoped cluster
        job = slurm.sbatch("srun rankrun ... job.py", nodes=3, out_dir=tmp_path)
        slurm.wait_running(job); ...
        info = slurm.wait_done(job, timeout=30)   # scontrol show job, as a dict
        assert info["ExitCode"] == "0:0"

Layout (as /work/shared/reference/recipes/slurm-up.sh with SLURM_CI_NETNS=1, with names of our
own): a "switch" namespace `rrsl-<tag>-sw` holds bridge `br0` with 10.215.X.254, where slurmctld
runs and where every client command (sbatch, srun, scontrol, scancel, squeue; no accounting, so no sacct) is run; node
n<i> is namespace `rrsl-<tag>-h<i>` with `eth0` = 10.215.X.<i>/24 and its own slurmd (NodeAddr
10.215.X.<i>). Nothing is attached to the root namespace. munged runs in the root namespace (its
socket is a file; files are shared by every namespace). <tag> holds the xdist worker, the pid and
a counter; X is reserved with an flock on /tmp/rrsl-nets/X (netns.py's scheme, a lock directory
of our own), so no two rigs share a name or a subnet. Ports are fixed (each rig's daemons live in
namespaces of their own), job ids start at 1 in every rig.

Everything else lives in a private directory /tmp/rrsl-<tag>-XXXX: slurm.conf, the munge key and
socket, StateSaveLocation, slurmd spool, logs, pid files, and `bin/`, which jobs see first on
PATH: `bin/scontrol` logs every call (argv, node, time) to `scontrol-calls.log` and execs the real
one, so a test can see what rankrun asked Slurm. `sl` is a shell wrapper for people:
`/tmp/rrsl-.../sl squeue`.

Daemons run in a cgroup v2 of the rig's own (<cgroup2 mount>/<our cgroup>/rrsl-<tag>), so every
job process, and every `rankrun-<job>` cgroup rankrun makes, is below it; jobs get TMPDIR=DIR/tmp,
where rankrun keeps its private run directories. After each test the `slurm` fixture cancels what
the test left queued, then fails the test if any job process is still running in any namespace
(10 s settle), if a job cgroup or a TMPDIR entry is left (5 s settle), or if a daemon died.

Daemons run in the foreground (-D / --foreground) as our own children, started with
`nsenter --net=/run/netns/NS` (not `ip netns exec`: it remounts /sys, hides /sys/fs/cgroup, and
slurmd then dies), so they are stopped by pid. Teardown (also after a failure): cancel every job,
wait for it to drain, TERM (then KILL) slurmd, slurmctld, munged by pid, kill by pid whatever is
still in our namespaces, our cgroup or holds a file of our directory, remove our cgroup and the
slurm_n<i> cgroups Slurm made (only ones that did not exist before the rig came up; with
proctrack/linuxproc, the default, it makes none), delete the namespaces, remove the directory,
release X. sweep_stale() (run before each bring-up) does the same for rigs whose process is gone.

Needs root, `ip netns`, slurmctld, slurmd, munged and the Slurm clients; skips (with the reason)
otherwise. Jobs inherit SLURM_CONF, PYTHON_EXEC (the Debian python that has torch),
GLOO_SOCKET_IFNAME=eth0 and PATH (bin/ first); SLURM_* of the caller's own environment are
dropped.
"""
import itertools
import os
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from netns import RigUnavailable, _alive, _describe, _ip, kill_all, list_namespaces, ns_pids, reserve_subnet

PREFIX = "rrsl-"
NET_BASE = "10.215"
LOCK_DIR = Path(os.environ.get("RRSL_LOCK_DIR", "/tmp/rrsl-nets"))
PYTHON = os.environ.get("RANKRUN_TEST_PYTHON", "/usr/bin/python3")
CTLD_PORT = 6817
SLURMD_PORT = 6818
CPUS = 4  # per fake node (SlurmdParameters=config_overrides lets it exceed the real cores)
_counter = itertools.count()

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "srun", "scontrol", "scancel", "squeue")
TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL",
            "DEADLINE"}



def check_available():
    """None if a cluster can be built here, else the reason it cannot."""
    if os.geteuid() != 0:
        return "the Slurm rig needs root (network namespaces, slurmd)"
    missing = [p for p in (*DAEMONS, *CLIENTS, "mungekey", "munge", "nsenter", "ip") if shutil.which(p) is None]
    if missing:
        return (f"not found on PATH: {' '.join(missing)} (apt-get install --no-install-recommends slurmctld slurmd "
                f"slurm-client munge; tools/install-deps.sh --test does it)")
    r = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=10)
    if r.returncode != 0:
        return f"`ip netns` is unavailable: {r.stderr.strip()}"
    return None


def _cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _exe(pid):
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return ""


def _ppid(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _comm(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def _holders(directory):
    """Pids (not ours) whose command line, cwd or open files name something under `directory`."""
    d = str(directory).rstrip("/") + "/"
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        pid = int(entry)
        hit = d in _cmdline(pid) + " "
        if not hit:
            try:
                hit = (os.readlink(f"/proc/{pid}/cwd") + "/").startswith(d)
            except OSError:
                pass
        if not hit:
            try:
                for fd in os.listdir(f"/proc/{pid}/fd"):
                    try:
                        if (os.readlink(f"/proc/{pid}/fd/{fd}") + "/").startswith(d):
                            hit = True
                            break
                    except OSError:
                        pass
            except OSError:
                pass
        if hit and _alive(pid):
            found.append(pid)
    return found


def _cgroup2_base():
    """<cgroup2 mount><this process's v2 cgroup>, or None (no cgroup2 mount or not in one)."""
    try:
        mounts = Path("/proc/self/mounts").read_text().splitlines()
        own = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    mount = next((l.split()[1] for l in mounts if l.split()[2:3] == ["cgroup2"]), None)
    path = next((l[3:] for l in own if l.startswith("0::")), None)
    if mount is None or path is None:
        return None
    base = Path(mount + (path if path != "/" else ""))
    return base if base.is_dir() else None


def _cgroup_tree_procs(d):
    """Pids in cgroup d and below."""
    pids = []
    for f in [d / "cgroup.procs", *d.rglob("cgroup.procs")]:
        try:
            pids += [int(x) for x in f.read_text().split()]
        except (OSError, ValueError):
            pass
    return sorted(set(pids))


def _slurm_cgroups(nodes):
    """Existing cgroup directories Slurm makes for these node names (v1: /sys/fs/cgroup/<ctrl>/
    slurm_<node>, v2: .../slurm_<node> too)."""
    out = set()
    for base in Path("/sys/fs/cgroup").glob("*"):
        for n in nodes:
            for d in (base / f"slurm_{n}", base / f"slurm_{n}.service"):
                if d.is_dir():
                    out.add(d)
    for n in nodes:
        d = Path("/sys/fs/cgroup") / f"slurm_{n}"
        if d.is_dir():
            out.add(d)
    return out


def _rm_cgroup_tree(d):
    for sub in sorted((p for p in d.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
        try:
            sub.rmdir()
        except OSError:
            pass
    try:
        d.rmdir()
    except OSError:
        pass


def sweep_stale():
    """Clean up after rigs whose process died without teardown (SIGKILLed run): their
    namespaces (processes killed by pid), their daemons (found by the directory in their command
    line or open files) and their directory. Only rigs whose creating pid is gone."""
    for d in Path("/tmp").glob(f"{PREFIX}*p*c*-*"):
        m = re.match(rf"^{PREFIX}[a-z0-9]+?p(\d+)c\d+-", d.name)
        if not m or _alive(int(m.group(1))) or not d.is_dir():
            continue
        kill_all(_holders(d))
        shutil.rmtree(d, ignore_errors=True)
    base = _cgroup2_base()
    for cg in base.glob(f"{PREFIX}*p*c*") if base is not None else []:
        m = re.match(rf"^{PREFIX}[a-z0-9]+?p(\d+)c\d+$", cg.name)
        if not m or _alive(int(m.group(1))) or not cg.is_dir():
            continue
        kill_all(_cgroup_tree_procs(cg))
        _rm_cgroup_tree(cg)
    for ns in list_namespaces():
        m = re.match(rf"^{PREFIX}[a-z0-9]+?p(\d+)c\d+-(sw|h\d+)$", ns)
        if not m or _alive(int(m.group(1))):
            continue
        kill_all(ns_pids(ns))
        _ip("netns", "del", ns, check=False)


class Job:
    """A submitted batch job: id, when sbatch was called (time.time()), its output files."""

    def __init__(self, rig, job_id, submitted, out, err, script):
        self.rig, self.id, self.submitted = rig, job_id, submitted
        self.out, self.err, self.script = Path(out), Path(err), Path(script)
        self.ended = None  # time.time() when wait_done() first saw a terminal state

    def output(self):
        parts = []
        for p in (self.out, self.err):
            try:
                parts.append(f"--- {p.name} ---\n{p.read_text(errors='replace')[-6000:]}")
            except OSError:
                parts.append(f"--- {p.name}: (none)")
        return "\n".join(parts)

    def __str__(self):
        return f"job {self.id}"


class SlurmRig:
    def __init__(self, nodes=3, proctrack="linuxproc"):
        if not 1 <= nodes <= 250:
            raise ValueError(nodes)
        worker = os.environ.get("PYTEST_XDIST_WORKER", "m")
        wid = worker[2:] if worker.startswith("gw") else "m"
        self.name = f"{PREFIX}{wid}p{os.getpid()}c{next(_counter)}"
        self.switch = f"{self.name}-sw"
        self.n = nodes
        self.nodes = [f"n{i}" for i in range(1, nodes + 1)]
        self.node_ns = {n: f"{self.name}-h{i}" for i, n in enumerate(self.nodes, 1)}
        self.proctrack = proctrack
        self.x = self._lock = None
        self.dir = None
        self.created = []  # namespaces
        self.daemons = {}  # name -> Popen
        self.cgroups_before = set()
        self.cgroup = None  # cgroup v2 of the rig: every daemon, so every job, lives below it
        self.setup_s = self.teardown_s = None
        self.env = {}

    # --- addresses and paths -----------------------------------------------------------------
    def addr(self, node):
        """NodeAddr of node 'n<i>' (or index i, 1-based)."""
        i = node if isinstance(node, int) else self.nodes.index(node) + 1
        return f"{NET_BASE}.{self.x}.{i}"

    @property
    def ctld_addr(self):
        return f"{NET_BASE}.{self.x}.254"

    @property
    def conf(self):
        return self.dir / "slurm.conf"

    @property
    def scontrol_log(self):
        return self.dir / "scontrol-calls.log"

    # --- lifecycle -----------------------------------------------------------------------------
    def up(self):
        t0 = time.monotonic()
        self.x, self._lock = reserve_subnet(LOCK_DIR, NET_BASE)
        self.cgroups_before = _slurm_cgroups(self.nodes)
        try:
            self.dir = Path(tempfile.mkdtemp(prefix=f"{self.name}-", dir="/tmp"))
            base = _cgroup2_base()
            if base is not None:
                try:
                    (base / self.name).mkdir()
                    self.cgroup = base / self.name
                except OSError:
                    self.cgroup = None  # no cgroup of our own: leaks of job cgroups go unchecked
            self._network()
            self._files()
            self._start_daemons()
        except (subprocess.CalledProcessError, RigUnavailable, OSError) as e:
            logs = self._log_tail()
            self.down()
            detail = f"{' '.join(e.cmd)}: {e.stderr}" if isinstance(e, subprocess.CalledProcessError) else str(e)
            raise RigUnavailable(f"cannot bring up Slurm: {detail}\n{logs}") from e
        self.setup_s = time.monotonic() - t0
        return self

    def _network(self):
        def add(ns):
            _ip("netns", "add", ns)
            self.created.append(ns)

        add(self.switch)
        _ip("-n", self.switch, "link", "set", "lo", "up")
        _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.switch, "addr", "add", f"{self.ctld_addr}/24", "dev", "br0")
        _ip("-n", self.switch, "link", "set", "br0", "up")
        for i, n in enumerate(self.nodes, 1):
            ns, port = self.node_ns[n], f"h{i}"
            add(ns)
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", port)
            _ip("-n", ns, "link", "set", port, "netns", self.switch)
            _ip("-n", ns, "addr", "add", f"{self.addr(i)}/24", "dev", "eth0")
            _ip("-n", self.switch, "link", "set", port, "master", "br0")
            _ip("-n", self.switch, "link", "set", port, "up")
            _ip("-n", ns, "link", "set", "eth0", "up")
        # traffic flows once the bridge port forwards (carrier reaches operstate via linkwatch)
        deadline = time.monotonic() + 5
        for i in range(1, self.n + 1):
            while "state forwarding" not in _ip("-n", self.switch, "-d", "link", "show", f"h{i}").stdout:
                if time.monotonic() > deadline:
                    raise RigUnavailable(f"bridge port h{i} not forwarding after 5 s")
                time.sleep(0.02)

    def _files(self):
        d = self.dir
        for sub in ("munge", "munge-key", "ctld", "log", "spool", "bin", "jobs", "tmp"):
            (d / sub).mkdir()
        os.chmod(d / "tmp", 0o1777)  # the jobs' TMPDIR: a run directory left there is a leak
        os.chmod(d, 0o755)           # munged wants its socket directory world-executable
        os.chmod(d / "munge", 0o755)
        os.chmod(d / "munge-key", 0o700)
        for n in self.nodes:
            (d / "spool" / n).mkdir()
        host = subprocess.run(["hostname", "-s"], capture_output=True, text=True, check=True).stdout.strip()
        lines = [
            f"# generated by {__file__}",
            f"ClusterName=rrsl{self.x}",
            f"SlurmctldHost={host}({self.ctld_addr})",
            "SlurmUser=root", "SlurmdUser=root",
            "AuthType=auth/munge", f"AuthInfo=socket={d}/munge/munge.socket.2", "CredType=cred/munge",
            f"SlurmctldPort={CTLD_PORT}", f"SlurmdPort={SLURMD_PORT}",
            f"StateSaveLocation={d}/ctld", f"SlurmdSpoolDir={d}/spool/%n",
            f"SlurmctldPidFile={d}/slurmctld.pid", f"SlurmdPidFile={d}/slurmd-%n.pid",
            f"SlurmctldLogFile={d}/log/slurmctld.log", f"SlurmdLogFile={d}/log/slurmd-%n.log",
            "SlurmctldDebug=info", "SlurmdDebug=info",
            "MailProg=/bin/true",
            f"ProctrackType=proctrack/{self.proctrack}", "TaskPlugin=task/none",
            "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core",
            "SchedulerType=sched/builtin", "ReturnToService=2", "MpiDefault=none",
            "JobAcctGatherType=jobacct_gather/none", "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/none", "SwitchType=switch/none",
            "SlurmdParameters=config_overrides",
            "KillWait=5", "SlurmdTimeout=10", "MessageTimeout=5", "InactiveLimit=0",
            "MinJobAge=600",          # finished jobs stay visible to `scontrol show job` (no accounting)
            "JobRequeue=1",
            "PreemptType=preempt/partition_prio", "PreemptMode=CANCEL",
        ]
        for i, n in enumerate(self.nodes, 1):
            lines.append(f"NodeName={n} NodeHostname={host} NodeAddr={self.addr(i)} CPUs={CPUS} RealMemory=1000 "
                         f"State=UNKNOWN")
        nodelist = ",".join(self.nodes)
        lines.append(f"PartitionName=debug Nodes={nodelist} Default=YES MaxTime=INFINITE State=UP PriorityTier=1")
        lines.append(f"PartitionName=urgent Nodes={nodelist} MaxTime=INFINITE State=UP PriorityTier=10 PreemptMode=OFF")
        self.conf.write_text("\n".join(lines) + "\n")
        (d / "gres.conf").write_text("AutoDetect=off\n")
        (d / "cgroup.conf").write_text("CgroupPlugin=cgroup/v1\nCgroupAutomount=no\n")
        for f in ("slurm.conf", "gres.conf", "cgroup.conf"):
            os.chmod(d / f, 0o644)
        # clients for people: `DIR/sl squeue`
        ctl = f"nsenter --net=/run/netns/{self.switch}"
        (d / "sl").write_text(f"#!/bin/sh\nexport SLURM_CONF={shlex.quote(str(self.conf))}\nexec {ctl} \"$@\"\n")
        os.chmod(d / "sl", 0o755)
        # scontrol as jobs see it: log the call, then the real one
        real = shutil.which("scontrol")
        (d / "bin" / "scontrol").write_text(
            "#!/bin/sh\n"
            f"printf '%s %s %s\\n' \"$(date +%s.%N)\" \"${{SLURMD_NODENAME:-?}}\" \"$*\" >> {shlex.quote(str(self.scontrol_log))}\n"
            f"exec {shlex.quote(real)} \"$@\"\n")
        os.chmod(d / "bin" / "scontrol", 0o755)
        self.env = {"SLURM_CONF": str(self.conf), "PYTHON_EXEC": PYTHON, "GLOO_SOCKET_IFNAME": "eth0",
                    "TMPDIR": str(d / "tmp"),
                    "PATH": f"{d}/bin:" + os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin")}

    def _spawn(self, name, args, ns=None):
        log = open(self.dir / "log" / f"{name}.stdio", "ab")
        wrap = ["nsenter", f"--net=/run/netns/{ns}"] if ns else []
        if self.cgroup is not None:  # join the rig's cgroup before exec, so that every child is in it
            wrap = ["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', str(self.cgroup)] + wrap
        env = self._base_env()
        p = subprocess.Popen(wrap + args, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env,
                             cwd=self.dir, start_new_session=True)
        log.close()
        self.daemons[name] = p
        return p

    def _base_env(self):
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_") and k != "CUDA_VISIBLE_DEVICES"}
        env.update(self.env)
        return env

    def _start_daemons(self):
        d = self.dir
        key = d / "munge-key" / "munge.key"
        subprocess.run(["mungekey", "-c", "-k", str(key)], check=True, capture_output=True, text=True)
        sock = d / "munge" / "munge.socket.2"
        self._spawn("munged", ["munged", "--foreground", f"--key-file={key}", f"--socket={sock}",
                               f"--pid-file={d}/munge/munged.pid", f"--log-file={d}/log/munged.log",
                               f"--seed-file={d}/munge/munged.seed"])
        self._wait(lambda: sock.exists(), 10, "munged's socket", "munged")
        conf = str(self.conf)
        self._spawn("slurmctld", ["slurmctld", "-D", "-f", conf], ns=self.switch)
        self._wait(lambda: self.client("scontrol", "ping", check=False, timeout=10).returncode == 0, 20,
                   "slurmctld to answer `scontrol ping`", "slurmctld")
        for n in self.nodes:
            self._spawn(f"slurmd-{n}", ["slurmd", "-D", "-f", conf, "-N", n], ns=self.node_ns[n])

        def idle():
            r = self.client("sinfo", "-h", "-N", "-p", "debug", "-o", "%N %T", check=False, timeout=10)
            states = dict(l.split() for l in r.stdout.splitlines() if len(l.split()) == 2)
            return len(states) == self.n and set(states.values()) == {"idle"}

        self._wait(idle, 30, "every node idle", None)

    def _wait(self, cond, timeout, what, daemon):
        deadline = time.monotonic() + timeout
        while not cond():
            for name, p in self.daemons.items():
                if p.poll() is not None:
                    raise RigUnavailable(f"{name} exited ({p.returncode}) while waiting for {what}")
            if time.monotonic() > deadline:
                raise RigUnavailable(f"timed out after {timeout}s waiting for {what}")
            time.sleep(0.05)

    def _log_tail(self, n=15):
        if self.dir is None:
            return ""
        parts = []
        for f in sorted((self.dir / "log").glob("*")) if (self.dir / "log").is_dir() else []:
            try:
                lines = f.read_text(errors="replace").splitlines()[-n:]
            except OSError:
                continue
            if lines:
                parts.append(f"--- {f.name} ---\n" + "\n".join(lines))
        return "\n".join(parts)

    def daemon_pids(self):
        """The daemons' pids, and slurmctld's helper slurmscriptd (its child, for its lifetime)."""
        pids = {p.pid for p in self.daemons.values() if p.poll() is None}
        ctld = self.daemons.get("slurmctld")
        if ctld is not None and ctld.poll() is None:
            for p in ns_pids(self.switch):
                if _ppid(p) == ctld.pid and _comm(p) == "slurmscriptd":
                    pids.add(p)
        return pids

    def down(self):
        """Stop everything, by pid; returns a list of problems (empty: clean)."""
        t0 = time.monotonic()
        problems = []
        ctld = self.daemons.get("slurmctld")
        if ctld is not None and ctld.poll() is None:
            r = self.client("squeue", "-h", "-o", "%i", check=False, timeout=10)
            jobs = r.stdout.split()
            if jobs:
                self.client("scancel", *jobs, check=False, timeout=10)
                deadline = time.monotonic() + 15
                while time.monotonic() < deadline:
                    r = self.client("squeue", "-h", "-o", "%i", check=False, timeout=10)
                    if r.returncode == 0 and not r.stdout.strip():
                        break
                    time.sleep(0.1)
        # slurmd first (they may still talk to slurmctld), then slurmctld, munged last
        order = [k for k in self.daemons if k.startswith("slurmd-")] + ["slurmctld", "munged"]
        for name in order:
            p = self.daemons.get(name)
            if p is None:
                continue
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    p.kill()
                    try:
                        p.wait(timeout=5)
                    except subprocess.TimeoutExpired:
                        problems.append(f"{name} (pid {p.pid}) would not die")
        # whatever is left in our namespaces (slurmstepd, tasks) or holds our files
        for ns in self.created:
            left = [p for p in ns_pids(ns) if _alive(p)]
            if left:
                problems.append(f"{ns}: killed at teardown: " + "; ".join(_describe(p) for p in left))
                stuck = kill_all(left)
                if stuck:
                    problems.append(f"{ns}: could not kill {stuck}")
        if self.dir is not None and self.dir.exists():
            left = _holders(self.dir)
            if left:
                problems.append(f"killed at teardown (held files of {self.dir}): " + "; ".join(_describe(p) for p in left))
                kill_all(left)
        if self.cgroup is not None and self.cgroup.is_dir():
            left = [p for p in _cgroup_tree_procs(self.cgroup) if _alive(p)]
            if left:
                problems.append("killed at teardown (in the rig's cgroup): " + "; ".join(_describe(p) for p in left))
                kill_all(left)
            _rm_cgroup_tree(self.cgroup)
            if self.cgroup.exists():
                problems.append(f"cgroup {self.cgroup} could not be removed")
        for d in _slurm_cgroups(self.nodes) - self.cgroups_before:
            _rm_cgroup_tree(d)
            if d.exists():
                problems.append(f"cgroup {d} could not be removed")
        for ns in reversed(self.created):
            _ip("netns", "del", ns, check=False)
        self.created = []
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            if self.dir.exists():
                problems.append(f"{self.dir} could not be removed")
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None
        self.teardown_s = time.monotonic() - t0
        return problems

    # --- clients -------------------------------------------------------------------------------
    def client(self, *args, env=None, timeout=30, check=True, input=None):
        """Run a Slurm client command where slurmctld is reachable (the switch namespace), with
        SLURM_CONF set. Returns CompletedProcess (text)."""
        full = self._base_env()
        if env:
            full.update({k: str(v) for k, v in env.items()})
        args = [str(a) for a in args]
        # the real client, not the logging wrapper that jobs find first on PATH
        args[0] = shutil.which(args[0], path=os.environ.get("PATH", os.defpath)) or args[0]
        cmd = ["nsenter", f"--net=/run/netns/{self.switch}", *args]
        r = subprocess.run(cmd, capture_output=True, text=True, env=full, timeout=timeout, input=input,
                           stdin=None if input is not None else subprocess.DEVNULL)
        if check and r.returncode != 0:
            raise AssertionError(f"{' '.join(args)} -> {r.returncode}\n{r.stdout}\n{r.stderr}")
        return r

    def scontrol(self, *args, **kw):
        return self.client("scontrol", *args, **kw)

    def sbatch(self, body, *options, nodes=None, name="job", out_dir=None, env=None, ntasks_per_node=1):
        """Submit a batch script (`body`: the commands; a shebang and `set -u` are added) with
        -N nodes and --ntasks-per-node (None to leave it out), plus `options`. The job's output
        goes to out_dir (default: the rig directory). Returns a Job."""
        out_dir = Path(out_dir) if out_dir is not None else self.dir / "jobs"
        out_dir.mkdir(parents=True, exist_ok=True)
        seq = next(_counter)
        script = self.dir / "jobs" / f"{name}-{seq}.sh"
        script.write_text("#!/bin/bash\n" + body.strip() + "\n")
        os.chmod(script, 0o755)
        out, err = out_dir / f"{name}-{seq}.out", out_dir / f"{name}-{seq}.err"
        args = ["sbatch", "--parsable", f"--job-name={name}", f"--output={out}", f"--error={err}",
                f"--chdir={out_dir}"]
        if nodes is not None:
            args.append(f"--nodes={nodes}")
        if ntasks_per_node is not None:
            args.append(f"--ntasks-per-node={ntasks_per_node}")
        args += [*options, str(script)]
        submitted = time.time()
        r = self.client(*args, env=env)
        job_id = r.stdout.strip().split(";")[0]
        assert job_id.isdigit(), r
        return Job(self, job_id, submitted, out, err, script)

    def show_job(self, job):
        """`scontrol show job -o J` as a dict ({} when Slurm no longer knows it)."""
        r = self.client("scontrol", "show", "job", "-o", str(getattr(job, "id", job)), check=False)
        if r.returncode != 0:
            return {}
        return parse_kv(r.stdout)

    def state(self, job):
        return self.show_job(job).get("JobState", "")

    def wait_state(self, job, states, timeout=30):
        """Wait until JobState is one of `states`; returns the job's dict; fails the test with
        the job's output on timeout."""
        states = {states} if isinstance(states, str) else set(states)
        deadline = time.monotonic() + timeout
        while True:
            info = self.show_job(job)
            if info.get("JobState") in states:
                return info
            if time.monotonic() > deadline:
                pytest.fail(f"{job}: JobState={info.get('JobState')} after {timeout}s, wanted {sorted(states)}\n"
                            f"{info}\n{job.output() if isinstance(job, Job) else ''}\n{self._log_tail(8)}")
            time.sleep(0.1)

    def wait_running(self, job, timeout=30):
        return self.wait_state(job, "RUNNING", timeout)

    def wait_done(self, job, timeout=60):
        info = self.wait_state(job, TERMINAL, timeout)
        if isinstance(job, Job) and job.ended is None:
            job.ended = time.time()
        return info

    def cancel(self, job, *options):
        return self.client("scancel", *options, str(getattr(job, "id", job)))

    def srun(self, *args, timeout=60, env=None):
        """srun ARGS from the switch namespace (an interactive step outside any batch job)."""
        return self.client("srun", *args, timeout=timeout, env=env, check=False)

    # --- what runs where -----------------------------------------------------------------------
    def node_processes(self, node):
        """{pid: description} of live processes in node's namespace other than its slurmd."""
        daemons = self.daemon_pids()
        return {p: _describe(p) for p in ns_pids(self.node_ns[node]) if p not in daemons and _alive(p)}

    def job_processes(self):
        """{node: {pid: description}} of everything but the daemons in the rig's namespaces
        (the switch namespace counts as node 'sw': sruns and sbatches run there)."""
        out = {n: self.node_processes(n) for n in self.nodes}
        daemons = self.daemon_pids()
        sw = {p: _describe(p) for p in ns_pids(self.switch) if p not in daemons and _alive(p)}
        if sw:
            out["sw"] = sw
        return {k: v for k, v in out.items() if v}

    def wait_quiet(self, timeout=15):
        """Wait until no job process is left anywhere in the rig; returns what is left ({}: ok)."""
        deadline = time.monotonic() + timeout
        while True:
            left = self.job_processes()
            if not left or time.monotonic() >= deadline:
                return left
            time.sleep(0.1)

    def pids_of(self, node, exe_name):
        """Pids in node's namespace whose executable's basename is exe_name."""
        return [p for p in ns_pids(self.node_ns[node]) if os.path.basename(_exe(p)) == exe_name and _alive(p)]

    def launcher_pids(self, node):
        """rankrun launchers in node's namespace: rankrun processes whose parent is not one (a
        launcher's own helpers, forked from it, share its executable)."""
        rr = set(self.pids_of(node, "rankrun"))
        return [p for p in sorted(rr) if _ppid(p) not in rr]

    def job_cgroups(self):
        """cgroups below the rig's own (rankrun makes rankrun-<job> for each job; one that is
        still there once the job has ended is a leak). [] without a cgroup v2 of our own."""
        if self.cgroup is None or not self.cgroup.is_dir():
            return []
        return sorted(p for p in self.cgroup.rglob("*") if p.is_dir())

    def tmp_leftovers(self):
        """What jobs left in their TMPDIR (rankrun's private run directories are removed at exit)."""
        return sorted((self.dir / "tmp").iterdir())

    def leaks(self, settle=5.0):
        """Job cgroups and TMPDIR entries still there after up to `settle` seconds."""
        deadline = time.monotonic() + settle
        while True:
            found = [f"cgroup {c}" for c in self.job_cgroups()] + [f"TMPDIR entry {t}" for t in self.tmp_leftovers()]
            if not found or time.monotonic() >= deadline:
                return found
            time.sleep(0.1)

    def clear_leaks(self):
        for c in self.job_cgroups():
            if c.exists():
                _rm_cgroup_tree(c)
        for t in self.tmp_leftovers():
            shutil.rmtree(t, ignore_errors=True) if t.is_dir() else t.unlink()

    def daemons_alive(self):
        return {name: p.poll() is None for name, p in self.daemons.items()}

    def scontrol_calls(self):
        try:
            return self.scontrol_log.read_text().splitlines()
        except OSError:
            return []

    def log(self, name):
        try:
            return (self.dir / "log" / name).read_text(errors="replace")
        except OSError:
            return ""


def parse_kv(text):
    """`Key=Value Key2=Value two ...` (scontrol -o) -> dict. Values may contain spaces only where
    Slurm puts them (Command=, WorkDir= are last on their line in practice); good enough for the
    fields tests read (JobState, ExitCode, Restarts, NodeList, Reason, ...)."""
    out = {}
    for m in re.finditer(r"(?:^|\s)([A-Za-z][A-Za-z0-9_:/]*)=(\S*)", text):
        out.setdefault(m.group(1), m.group(2))
    return out


# --- fixtures ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def slurm_cluster():
    """One cluster per test module. Teardown always runs, and fails the module's last test if
    it had to kill anything or could not remove something."""
    reason = check_available()
    if reason:
        pytest.skip(reason)
    sweep_stale()
    rig = SlurmRig()
    try:
        rig.up()
    except RigUnavailable as e:
        pytest.fail(str(e), pytrace=False)
    print(f"\nslurm rig {rig.name}: up in {rig.setup_s:.2f}s ({rig.dir}, {NET_BASE}.{rig.x}.0/24)")
    yield rig
    problems = rig.down()
    print(f"\nslurm rig {rig.name}: down in {rig.teardown_s:.2f}s")
    if problems:
        pytest.fail("Slurm rig teardown:\n  " + "\n  ".join(problems), pytrace=False)


@pytest.fixture
def slurm(slurm_cluster):
    """The module's cluster, for one test: afterwards every job of the test is cancelled, and the
    test fails if any process of a job was still running anywhere when it ended (after a short
    settle), or if a daemon died."""
    rig = slurm_cluster
    before = set(rig.client("squeue", "-h", "-o", "%i", check=False).stdout.split())
    yield rig
    problems = []
    # jobs the test left queued or running are cancelled first: what counts is what outlives them
    jobs = set(rig.client("squeue", "-h", "-o", "%i", check=False).stdout.split()) - before
    if jobs:
        rig.client("scancel", *sorted(jobs), check=False)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and \
                set(rig.client("squeue", "-h", "-o", "%i", check=False).stdout.split()) & jobs:
            time.sleep(0.1)
    dead = [n for n, alive in rig.daemons_alive().items() if not alive]
    if dead:
        problems.append(f"daemon(s) died during the test: {dead}\n{rig._log_tail(8)}")
    left = rig.wait_quiet(timeout=10)
    if left:
        problems.append("process(es) still running 10 s after the test's jobs had ended:\n    " + "\n    ".join(
            f"{node}: {d}" for node, procs in left.items() for d in procs.values()))
        for procs in left.values():  # keep the next test's slate clean
            kill_all(list(procs))
    leaks = rig.leaks(settle=0 if left else 5)
    if leaks:
        problems.append("left behind by the test's jobs:\n    " + "\n    ".join(leaks))
        rig.clear_leaks()
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


__all__ = ["SlurmRig", "Job", "slurm_cluster", "slurm", "check_available", "parse_kv", "PREFIX", "RigUnavailable"]
