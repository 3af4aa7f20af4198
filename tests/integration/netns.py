"""Network namespaces as hosts: a rig for multi-node tests on one machine.

    def test_x(hosts):
        rig = hosts(3)                      # 3 hosts on 10.213.X.0/24, X unique to this rig
        p = rig.host(0).popen(["python3", "-c", "..."])
        rig.cut(2); rig.plug(2)             # pull / restore host 2's cable at the switch
        rig.impair(2, delay_ms=150, loss=0.2)  # host 2's cable: 150 ms each way, 20% lost each way
        rig.clear(2)                        # ... a plain cable again
        out = p.finish(timeout=10)          # Output(returncode, stdout, stderr)

Layout (as /work/shared/reference/recipes/netns-up.sh, with names of our own): a "switch"
namespace `rrmn-<tag>-sw` holds bridge `br0`; host i is namespace `rrmn-<tag>-h<i>` with `lo` and
`eth0` = 10.213.X.<i+1>/24, a veth whose peer `h<i>` sits in the switch namespace, enslaved to
`br0`. Nothing is attached to the root namespace. <tag> holds the xdist worker, the pid and a
counter, so two rigs never share a name; X is reserved with an flock on /tmp/rrmn-nets/X, so
two rigs (in any process) never share a subnet. Link names live inside our private namespaces
and are at most 4 characters.

An impaired cable (this kernel has no sch_netem): the first rig.impair(i, ...) puts a "wire"
namespace `rrmn-<tag>-w<i>` into host i's cable. The veth end that sat at the switch moves there
(as `hx`, still the peer of the host's eth0); a second veth `sx` leads from it to the switch,
where its peer takes the old port's name `h<i>` (so cut/plug work as before). A forwarder
(link_forwarder.py, a process of the rig) copies frames between hx and sx, each delayed by
delay_ms (+ jitter_ms) and lost with probability `loss`, in each direction: the round-trip time
is 2 x delay_ms more than before. The first impair() re-plugs host i's cable (a carrier flap
of a few ms): call it before the traffic starts; later impair()/clear() only change the
forwarder's settings (clear: delay 0, no loss; the wire stays). The interfaces that feed the
wire get gso_max_segs=1 (frames reach the forwarder one MTU at a time; loss is per frame).
See link_forwarder.py for the throughput it sustains.

Teardown (the fixture's, also on failure): stop the rig's forwarders by pid; note every process
still in a host, wire or switch namespace, SIGTERM them by pid, SIGKILL after a short wait,
delete the namespaces, release X; then fail the test if any process (other than a forwarder)
had been left running when the test body ended, or a forwarder could not be stopped.

Needs root and `ip netns`; skips otherwise. Processes started in a host get
GLOO_SOCKET_IFNAME=eth0 and PYTHON_EXEC (the Debian python that has torch).

A host as a pod (test_launch_contexts.py): `host.hosts_file(["10.213.X.1 pj-master-0", ...])`
writes /etc/netns/<ns>/hosts, which `ip netns exec` bind-mounts over /etc/hosts for what
`popen` starts (not with nsenter=True, which mounts nothing); `popen(..., hostname="pj-master-0")`
starts the program in a UTS namespace of its own with that hostname (`unshare --uts`, then
`hostname`, then exec: the Popen pid is still the program). The teardown removes the
/etc/netns/<ns> directories the rig wrote, and sweep_stale() those of namespaces it deletes.

Note: `ip netns exec` unshares the mount namespace and remounts /sys for the network
namespace, which hides the cgroup mounts (/sys/fs/cgroup...). A program started with
`popen(...)` therefore sees no cgroup2 mount; `popen(..., nsenter=True)` uses
`nsenter --net=/run/netns/NS` instead, which keeps the mounts. Both exec, so the Popen pid is the
program itself.
"""
import fcntl
import itertools
import json
import os
import re
import shutil
import signal
import select
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

PREFIX = "rrmn-"
NET_BASE = "10.213"
LOCK_DIR = Path(os.environ.get("RRMN_LOCK_DIR", "/tmp/rrmn-nets"))
PYTHON = os.environ.get("RANKRUN_TEST_PYTHON", "/usr/bin/python3")
ETC_NETNS = Path("/etc/netns")  # `ip netns exec NS` bind-mounts /etc/netns/NS/<file> over /etc/<file>
FORWARDER = Path(__file__).resolve().parent / "link_forwarder.py"
_counter = itertools.count()


class RigUnavailable(Exception):
    pass


def _ip(*args, check=True, timeout=10):
    r = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise subprocess.CalledProcessError(r.returncode, ["ip", *args], r.stdout, r.stderr)
    return r


def _alive(pid):
    """True while pid exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def _describe(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        return f"{pid} {cmd[:160]}"
    except OSError:
        return f"{pid} (gone)"


def list_namespaces():
    r = _ip("netns", "list", check=False)
    return [line.split()[0] for line in r.stdout.splitlines() if line.strip()]


def ns_pids(ns):
    r = _ip("netns", "pids", ns, check=False)
    return [int(p) for p in r.stdout.split() if p.isdigit()]


def kill_all(pids, term_wait=1.0, kill_wait=5.0):
    """SIGTERM each pid, SIGKILL whatever is left after term_wait; wait for them to be gone."""
    pids = [p for p in pids if p != os.getpid()]
    for p in pids:
        try:
            os.kill(p, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + term_wait
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.05)
    left = [p for p in pids if _alive(p)]
    for p in left:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + kill_wait
    while time.monotonic() < deadline and any(_alive(p) for p in left):
        time.sleep(0.05)
    return [p for p in left if _alive(p)]


def reserve_subnet(lock_dir=None, net_base=None):
    """A third octet X no other live rig holds: an flock on <lock_dir>/X (default LOCK_DIR), held
    for the rig's life (the kernel drops it if the process dies, so nothing stale can block a
    later run). Returns (X, the locked fd)."""
    lock_dir = Path(lock_dir or LOCK_DIR)
    lock_dir.mkdir(parents=True, exist_ok=True)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    start = (int(worker[2:]) * 101 if worker[2:].isdigit() else 0) + os.getpid() % 13 + next(_counter) * 3
    for k in range(254):
        x = (start + k) % 254 + 1
        fd = os.open(lock_dir / str(x), os.O_CREAT | os.O_RDWR, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)  # another rig (maybe ours: flocks are per open file) holds it
            continue
        return x, fd
    raise RigUnavailable(f"no free {net_base or NET_BASE}.X.0/24 subnet (254 rigs alive?)")


def sweep_stale():
    """Remove rrmn- namespaces whose creating process (pid in the name) is gone: a run that was
    SIGKILLed cannot clean up after itself. Processes inside are killed by pid. Their
    /etc/netns/<ns> directories go too."""
    live = set(list_namespaces())
    etc = {d.name for d in ETC_NETNS.iterdir()} if ETC_NETNS.is_dir() else set()
    for ns in sorted(live | etc):
        m = re.match(rf"^{PREFIX}[a-z0-9]+?p(\d+)c\d+-(sw|h\d+|w\d+)$", ns)
        if not m or Path(f"/proc/{m.group(1)}").exists():
            continue
        if ns in live:
            kill_all(ns_pids(ns))
            _ip("netns", "del", ns, check=False)
        shutil.rmtree(ETC_NETNS / ns, ignore_errors=True)


class Output:
    def __init__(self, returncode, stdout, stderr):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr

    def __repr__(self):
        return f"rc={self.returncode}\n--- stdout ---\n{self.stdout}\n--- stderr ---\n{self.stderr}"


class Proc:
    """A process started in a host namespace. stdout and stderr are read by threads into lists,
    so several processes can be watched at once without blocking on a pipe."""

    def __init__(self, popen, host, args):
        self.popen, self.host, self.args = popen, host, args
        self.pid = popen.pid
        self.out, self.err = [], []
        self.out_t, self.err_t = [], []  # when each line arrived (time.monotonic())
        self.cond = threading.Condition()
        self.started = time.monotonic()
        self.ended = None
        self.threads = [threading.Thread(target=self._pump, args=(s, l), daemon=True)
                        for s, l in ((popen.stdout, self.out), (popen.stderr, self.err))]
        for t in self.threads:
            t.start()

    def _pump(self, stream, lines):
        times = self.out_t if lines is self.out else self.err_t
        try:
            for line in stream:
                with self.cond:
                    lines.append(line)
                    times.append(time.monotonic())
                    self.cond.notify_all()
        except (OSError, ValueError):
            pass
        finally:
            with self.cond:
                self.cond.notify_all()

    @property
    def stdout(self):
        with self.cond:
            return "".join(self.out)

    @property
    def stderr(self):
        with self.cond:
            return "".join(self.err)

    def timed(self, stream="err", since=None):
        """[(seconds since `since` (default: the start), line)] of stdout or stderr."""
        since = self.started if since is None else since
        with self.cond:
            pairs = zip(self.out_t, self.out) if stream == "out" else zip(self.err_t, self.err)
            return [(t - since, l.rstrip("\n")) for t, l in pairs]

    def count(self, pattern, stream="out"):
        rx = re.compile(pattern)
        with self.cond:
            return sum(1 for l in (self.out if stream == "out" else self.err) if rx.search(l))

    def wait_for(self, pattern, count=1, timeout=30, stream="out"):
        """Wait until `count` lines of stdout (stream="err": stderr) match pattern; True if so,
        False on timeout or when the process ended (and its pipe closed) first."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        lines = self.out if stream == "out" else self.err
        with self.cond:
            while True:
                if sum(1 for l in lines if rx.search(l)) >= count:
                    return True
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                if self.popen.poll() is not None and not any(t.is_alive() for t in self.threads):
                    return False
                self.cond.wait(min(left, 0.2))

    def signal(self, signo):
        """Signal the process itself (never a recycled pid: nothing once it has been reaped)."""
        self.popen.send_signal(signo)

    def poll(self):
        rc = self.popen.poll()
        if rc is not None and self.ended is None:
            self.ended = time.monotonic()
        return rc

    def wait(self, timeout):
        """Exit code, or None if still running after timeout (then it is left running)."""
        deadline = time.monotonic() + timeout
        while self.poll() is None:
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.02)
        for t in self.threads:
            t.join(timeout=max(0.1, deadline - time.monotonic()))
        return self.popen.returncode

    def finish(self, timeout=30):
        """Wait for the exit and return Output; on timeout the process is killed and the test
        fails (showing what it printed)."""
        rc = self.wait(timeout)
        if rc is None:
            self.signal(signal.SIGKILL)
            self.wait(5)
            pytest.fail(f"{self.host.ns}: {self.args[0]} did not finish in {timeout}s\n"
                        f"--- stdout ---\n{self.stdout}\n--- stderr ---\n{self.stderr}")
        return Output(rc, self.stdout, self.stderr)

    def _close(self):
        for s in (self.popen.stdout, self.popen.stderr):
            try:
                s.close()
            except Exception:
                pass


class Host:
    def __init__(self, rig, index):
        self.rig, self.index = rig, index
        self.ns = f"{rig.name}-h{index}"
        self.port = f"h{index}"           # its end at the switch
        self.addr = f"{NET_BASE}.{rig.x}.{index + 1}"
        self.wire = None                  # a Wire once rig.impair(index, ...) put one in its cable

    def env(self, env=None):
        full = dict(os.environ)
        full.pop("CUDA_VISIBLE_DEVICES", None)
        full.setdefault("PYTHON_EXEC", PYTHON)
        full["GLOO_SOCKET_IFNAME"] = "eth0"
        if env:
            full.update({k: str(v) for k, v in env.items()})
        full["GLOO_SOCKET_IFNAME"] = "eth0"
        return full

    def hosts_file(self, lines):
        """This host's /etc/hosts, as `ip netns exec` shows it to what popen starts: `lines`
        ("ADDRESS NAME [ALIAS...]"), after localhost's own entries. Removed by the teardown."""
        d = ETC_NETNS / self.ns
        d.mkdir(parents=True, exist_ok=True)
        self.rig.etc_dirs.append(d)
        text = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n" + "".join(f"{l}\n" for l in lines)
        (d / "hosts").write_text(text)
        return d / "hosts"

    def popen(self, args, env=None, nsenter=False, hostname=None, **kw):
        """Start args in this host (stdout/stderr piped, text). Returns a Proc. hostname: in a UTS
        namespace of its own with that hostname (see the module's docstring)."""
        args = [str(a) for a in args]
        if hostname is not None:
            args = ["unshare", "--uts", "sh", "-c", 'hostname "$1" && shift && exec "$@"', "sh", str(hostname), *args]
        wrap = (["nsenter", f"--net=/run/netns/{self.ns}"] if nsenter else ["ip", "netns", "exec", self.ns])
        kw.setdefault("stdin", subprocess.DEVNULL)
        p = subprocess.Popen(wrap + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=self.env(env),
                             **kw)
        proc = Proc(p, self, args)
        self.rig.procs.append(proc)
        return proc

    def run(self, args, env=None, timeout=30, **kw):
        return self.popen(args, env=env, **kw).finish(timeout)

    def pids(self):
        return self.rig.pids(self.index)


class Wire:
    """The forwarder in host i's cable (Rig.impair): its namespace, process and settings."""

    def __init__(self, rig, host):
        self.host = host
        self.ns = f"{rig.name}-w{host.index}"
        self.proc = None
        self.settings = {"delay_ms": 0, "jitter_ms": 0, "loss": 0.0}

    def start(self):
        self.proc = subprocess.Popen(["ip", "netns", "exec", self.ns, sys.executable, str(FORWARDER), "hx", "sx"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0)
        self._reply("ready")

    def _reply(self, expect=None, timeout=10):
        """The forwarder's next line on stdout (within timeout); its stderr if it died."""
        out = self.proc.stdout
        ready, _, _ = select.select([out], [], [], timeout)
        line = out.readline().decode().strip() if ready else ""
        if not line or (expect is not None and line != expect):
            err = b""
            if self.proc.poll() is not None:
                err = self.proc.stderr.read()
            raise RuntimeError(f"{self.ns}: the forwarder answered {line!r} (expected {expect!r}), "
                               f"rc={self.proc.poll()}: {err.decode(errors='replace')[-2000:]}")
        return line

    def send(self, cmd, expect=None):
        self.proc.stdin.write((json.dumps(cmd) + "\n").encode())
        self.proc.stdin.flush()
        return self._reply(expect)

    def configure(self, **settings):
        self.settings.update(settings)
        self.send(self.settings, expect="ok")

    def stats(self):
        """{"a>b" (host to switch): {frames, bytes, dropped, ...}, "b>a": {...}}"""
        return json.loads(self.send({"stats": True}))

    def stop(self):
        """SIGTERM the forwarder by pid, SIGKILL if it lingers; True once it is gone."""
        p, self.proc = self.proc, None
        if p is None:
            return True
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(timeout=2)
            except subprocess.TimeoutExpired:
                p.kill()
                try:
                    p.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    return False
        for f in (p.stdin, p.stdout, p.stderr):
            try:
                f.close()
            except Exception:
                pass
        return True


class Rig:
    live = []

    def __init__(self, n):
        if n < 1 or n > 250:
            raise ValueError(n)
        worker = os.environ.get("PYTEST_XDIST_WORKER", "m")
        wid = worker[2:] if worker.startswith("gw") else "m"
        self.name = f"{PREFIX}{wid}p{os.getpid()}c{next(_counter)}"
        self.switch = f"{self.name}-sw"
        self.x, self._lock = None, None
        self.hosts = []
        self.procs = []
        self.created = []
        self.etc_dirs = []  # /etc/netns/<ns> directories written by Host.hosts_file
        self.setup_s = self.teardown_s = None
        self.n = n

    # --- lifecycle -------------------------------------------------------------------------
    def up(self):
        t0 = time.monotonic()
        self.x, self._lock = reserve_subnet()
        Rig.live.append(self)
        self.hosts = [Host(self, i) for i in range(self.n)]
        try:
            self._add_ns(self.switch)
            _ip("-n", self.switch, "link", "set", "lo", "up")
            _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
            _ip("-n", self.switch, "link", "set", "br0", "up")
            for h in self.hosts:
                self._add_ns(h.ns)
                _ip("-n", h.ns, "link", "set", "lo", "up")
                _ip("-n", h.ns, "link", "add", "eth0", "type", "veth", "peer", "name", h.port)
                _ip("-n", h.ns, "link", "set", h.port, "netns", self.switch)
                _ip("-n", h.ns, "addr", "add", f"{h.addr}/24", "dev", "eth0")
                _ip("-n", self.switch, "link", "set", h.port, "master", "br0")
                _ip("-n", self.switch, "link", "set", h.port, "up")
                _ip("-n", h.ns, "link", "set", "eth0", "up")
            for h in self.hosts:
                self._wait_up(h)
        except subprocess.CalledProcessError as e:
            self.down()
            raise RigUnavailable(f"cannot build the namespaces: {' '.join(e.cmd)}: {e.stderr.strip()}") from e
        self.setup_s = time.monotonic() - t0
        return self

    def _add_ns(self, ns):
        _ip("netns", "add", ns)
        self.created.append(ns)

    def _port_state(self, h):
        """(host eth0 operstate, switch port operstate, bridge port state); with a wire in the
        cable, also its two ends' operstates."""
        try:
            eth = json.loads(_ip("-n", h.ns, "-j", "link", "show", "eth0").stdout)[0]
            port = json.loads(_ip("-n", self.switch, "-j", "-d", "link", "show", h.port).stdout)[0]
            wire = [json.loads(_ip("-n", h.wire.ns, "-j", "link", "show", end).stdout)[0].get("operstate")
                    for end in ("hx", "sx")] if h.wire else []
        except (subprocess.CalledProcessError, ValueError, IndexError):
            return (None, None, None) + ((None, None) if h.wire else ())
        slave = port.get("linkinfo", {}).get("info_slave_data", {})
        return (eth.get("operstate"), port.get("operstate"), slave.get("state"), *wire)

    def _wait_up(self, h, timeout=5):
        """Wait until traffic flows through host h's cable: both ends operationally UP and the
        bridge port forwarding. A carrier change reaches the operstate through the kernel's
        linkwatch, up to ~1 s later; until then the port is `disabled` and drops frames."""
        deadline = time.monotonic() + timeout
        while True:
            state = self._port_state(h)
            if state == ("UP", "UP", "forwarding") + (("UP", "UP") if h.wire else ()):
                return
            if time.monotonic() >= deadline:
                raise subprocess.CalledProcessError(1, ["ip", "-n", self.switch, "link", "show", h.port], "",
                                                    f"{h.ns}'s cable not up after {timeout}s: {state}")
            time.sleep(0.02)

    def leftovers(self, settle=0.5):
        """{namespace: [pid description]} for every live process in our namespaces, after
        giving processes that are already on their way out up to `settle` seconds."""
        ours = {h.wire.proc.pid for h in self.hosts if h.wire and h.wire.proc}  # the rig's forwarders
        deadline = time.monotonic() + settle
        while time.monotonic() < deadline and any(_alive(p) for ns in self.created for p in ns_pids(ns)
                                                  if p not in ours):
            time.sleep(0.05)
        found = {}
        for ns in self.created:
            alive = [_describe(p) for p in ns_pids(ns) if _alive(p) and p not in ours]
            if alive:
                found[ns] = alive
        return found

    def down(self):
        """Kill everything in our namespaces by pid, delete them, release the subnet. Returns
        the pids that could not be killed (should be empty)."""
        t0 = time.monotonic()
        stuck = []
        for h in self.hosts:
            if h.wire and h.wire.proc:
                pid = h.wire.proc.pid
                if not h.wire.stop():
                    stuck.append(pid)
        for ns in self.created:
            stuck += kill_all(ns_pids(ns))
        for p in self.procs:
            if p.popen.poll() is None:
                try:
                    p.popen.kill()
                except ProcessLookupError:
                    pass
            try:
                p.popen.wait(timeout=5)
            except subprocess.TimeoutExpired:
                stuck.append(p.pid)
            for t in p.threads:
                t.join(timeout=1)
            p._close()
        for ns in reversed(self.created):  # hosts before the switch
            _ip("netns", "del", ns, check=False)
        self.created = []
        for d in self.etc_dirs:
            shutil.rmtree(d, ignore_errors=True)
        self.etc_dirs = []
        if self._lock is not None:
            os.close(self._lock)  # releases the flock
            self._lock = None
        if self in Rig.live:
            Rig.live.remove(self)
        self.teardown_s = time.monotonic() - t0
        return stuck

    # --- the API tests use -----------------------------------------------------------------
    def host(self, i):
        return self.hosts[i]

    @property
    def subnet(self):
        return f"{NET_BASE}.{self.x}.0/24"

    def cut(self, i):
        """Pull host i's cable: its port at the switch goes down (eth0 loses carrier). With a
        wire in the cable, both of its ends go down (frames it holds are lost)."""
        h = self.hosts[i]
        _ip("-n", self.switch, "link", "set", h.port, "down")
        if h.wire:
            _ip("-n", h.wire.ns, "link", "set", "hx", "down")

    def plug(self, i, wait=True):
        """Plug host i's cable back; by default returns once frames flow again (<= ~1 s)."""
        h = self.hosts[i]
        if h.wire:
            _ip("-n", h.wire.ns, "link", "set", "hx", "up")
        _ip("-n", self.switch, "link", "set", h.port, "up")
        if wait:
            self._wait_up(h)

    def impair(self, i, delay_ms=0, loss=0.0, jitter_ms=0):
        """Host i's cable delays each frame by delay_ms (+- jitter_ms, never reordered) and
        loses it with probability `loss`, in each direction. The first call puts a wire in the
        cable (see the module's docstring); returns once the forwarder applies the settings."""
        h = self.hosts[i]
        if h.wire is None:
            self._add_wire(h)
        h.wire.configure(delay_ms=delay_ms, loss=loss, jitter_ms=jitter_ms)

    def clear(self, i):
        """Host i's cable is a plain one again (the wire stays, forwarding without delay or loss)."""
        if self.hosts[i].wire:
            self.hosts[i].wire.configure(delay_ms=0, loss=0.0, jitter_ms=0)

    def _add_wire(self, h):
        wire = Wire(self, h)
        try:
            self._add_ns(wire.ns)
            # Quiet: the wire has no addresses and sends nothing of its own (no IPv6 ND).
            subprocess.run(["ip", "netns", "exec", wire.ns, "sh", "-c",
                            "echo 1 > /proc/sys/net/ipv6/conf/default/disable_ipv6; "
                            "echo 1 > /proc/sys/net/ipv6/conf/all/disable_ipv6"], check=True, timeout=10,
                           capture_output=True)
            _ip("-n", wire.ns, "link", "set", "lo", "up")
            _ip("-n", self.switch, "link", "set", h.port, "down")
            _ip("-n", self.switch, "link", "set", h.port, "nomaster")
            _ip("-n", self.switch, "link", "set", h.port, "netns", wire.ns)
            _ip("-n", wire.ns, "link", "set", h.port, "name", "hx")
            _ip("-n", wire.ns, "link", "add", "sx", "type", "veth", "peer", "name", h.port)
            _ip("-n", wire.ns, "link", "set", h.port, "netns", self.switch)
            # Frames into the wire one MTU at a time: the host's eth0 and the switch's port
            # segment what they send to it.
            _ip("-n", h.ns, "link", "set", "eth0", "gso_max_segs", "1")
            _ip("-n", self.switch, "link", "set", h.port, "gso_max_segs", "1")
            _ip("-n", self.switch, "link", "set", h.port, "master", "br0")
            for end in ("hx", "sx"):
                _ip("-n", wire.ns, "link", "set", end, "promisc", "on")
            h.wire = wire
            wire.start()  # bound before the ends come up: no frame passes unforwarded
            for end in ("hx", "sx"):
                _ip("-n", wire.ns, "link", "set", end, "up")
            _ip("-n", self.switch, "link", "set", h.port, "up")
            self._wait_up(h)
        except subprocess.CalledProcessError as e:
            raise RigUnavailable(f"cannot put a wire into {h.ns}'s cable: {' '.join(e.cmd)}: {e.stderr.strip()}") from e

    def wire_stats(self, i):
        """The forwarder's counters for host i's cable (None without a wire)."""
        return self.hosts[i].wire.stats() if self.hosts[i].wire else None

    def pids(self, i):
        """Live (non-zombie) pids in host i's namespace (`ip netns pids`)."""
        return [p for p in ns_pids(self.hosts[i].ns) if _alive(p)]

    def wait_empty(self, i, timeout=10):
        """Wait until no process is left in host i; returns what is still there (empty: ok)."""
        deadline = time.monotonic() + timeout
        while True:
            left = self.pids(i)
            if not left or time.monotonic() >= deadline:
                return [_describe(p) for p in left]
            time.sleep(0.05)


def check_available():
    """None if the rig can work here, else the reason it cannot."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "iproute2's `ip` is not installed"
    try:
        r = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"`ip netns` is unavailable: {e}"
    if r.returncode != 0:
        return f"`ip netns` is unavailable: {r.stderr.strip()}"
    return None


@pytest.fixture
def hosts():
    """Factory fixture: `rig = hosts(n)` builds n hosts (and may be called more than once).
    Teardown always runs; the test fails if any process was left in a namespace."""
    reason = check_available()
    if reason:
        pytest.skip(reason)
    sweep_stale()
    rigs = []

    def make(n):
        rig = Rig(n)
        try:
            rig.up()
        except RigUnavailable as e:
            pytest.skip(str(e))
        rigs.append(rig)
        return rig

    yield make

    problems = []
    for rig in rigs:
        left = rig.leftovers()
        stuck = rig.down()
        for ns, procs in left.items():
            problems.append(f"{ns}: {len(procs)} process(es) left running when the test ended:\n    "
                            + "\n    ".join(procs))
        if stuck:
            problems.append(f"{rig.name}: could not kill {stuck}")
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


__all__ = ["hosts", "Rig", "Host", "Wire", "Proc", "Output", "check_available", "list_namespaces", "PREFIX"]


# --- what the multi-node tests share: each node's output, and waiting for every node ---------
def snapshot(p, since):
    """A finished (or running) Proc's Output, with its stderr and stdout lines timed from `since`."""
    o = Output(p.popen.returncode, p.stdout, p.stderr)
    o.timed_err = p.timed("err", since)
    o.timed_out = p.timed("out", since)
    o.host, o.addr = p.host.index, p.host.addr
    o.elapsed = (p.ended - since) if p.ended is not None else None
    o.tmpdir = getattr(p, "tmpdir", None)
    return o


def report(outs):
    """Every node's exit, stdout tail and timed stderr, for an assertion message."""
    parts = []
    for o in outs:
        el = "running" if o.elapsed is None else f"{o.elapsed:.1f}s"
        err = "\n".join(f"{t:6.2f}s {l}" for t, l in o.timed_err)
        parts.append(f"=== host {o.host} ({o.addr}): rc={o.returncode} ({el})\n"
                     f"--- stdout ---\n{o.stdout[-5000:]}\n--- stderr (time of arrival) ---\n{err[-7000:]}")
    return "\n".join(parts)


def finish_all(procs, timeout, since):
    """Wait for every proc; each Output carries .elapsed since `since`. Kills and fails (with
    everyone's output) if one is still running after `timeout`."""
    deadline = time.monotonic() + timeout
    while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
        time.sleep(0.02)
    hung = [p for p in procs if p.poll() is None]
    for p in hung:
        p.signal(signal.SIGKILL)
    for p in procs:
        p.wait(5)
    outs = [snapshot(p, since) for p in procs]
    if os.environ.get("RRMN_SHOW"):  # RRMN_SHOW=1 pytest -s: print every node's output
        print("\n" + report(outs))
    if hung:
        pytest.fail(f"hosts {[p.host.index for p in hung]} did not finish in {timeout}s (killed)\n" + report(outs))
    return outs
