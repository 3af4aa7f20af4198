"""rankrun as a systemd service (packaging/systemd/rankrun@.service), under a real manager.

A private `systemd --user` manager runs as root inside its own mount namespace (a tmpfs on
/run/systemd with an empty /run/systemd/system, so that it starts without systemd as PID 1) and
its own child cgroup in every hierarchy it manages (a manager started in the root cgroup would
move every process of the machine, PID 1 included, into /init.scope). See
/work/shared/reference/recipes/systemd-tests/user-manager.sh. The tests install a copy of the
unit whose ExecStart is the rankrun under test (RANKRUN_BUILD_DIR) and whose EnvironmentFile
lies in the test's directory, start instances, watch ActiveState/StatusText/cgroups, stop them
and check that nothing of the job is left. The manager is ended by pid and its cgroups removed.

The `systemd-analyze verify` test checks the unit as shipped except for ExecStart (which must
name an existing executable during verify: the built rankrun) and EnvironmentFile.
"""
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from harness import RANKRUN, ROOT

UNIT = ROOT / "packaging" / "systemd" / "rankrun@.service"
SYSTEMD = Path("/lib/systemd/systemd")
HIERARCHIES = ["systemd", "unified", "cpu", "memory", "pids"]  # systemd 252 on a hybrid layout
PYTHON = "/usr/bin/python3"

WORKER = r"""
import os, sys, time
d = sys.argv[1]
path = os.path.join(d, "started-%s" % os.environ["LOCAL_RANK"])
with open(path + ".tmp", "w") as f:  # then renamed: the test never reads a file not yet written
    f.write(str(os.getpid()))
os.rename(path + ".tmp", path)
print("worker", os.environ["RANK"], "up", flush=True)
time.sleep(float(sys.argv[2]))
"""


def test_unit_verifies_cleanly(tmp_path):
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed")
    if not RANKRUN.exists():
        pytest.skip(f"{RANKRUN} is not built")
    unit = tmp_path / "rankrun@verify.service"
    unit.write_text(installed_unit(tmp_path))
    env = dict(os.environ, XDG_RUNTIME_DIR=str(tmp_path))
    r = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stderr == "", r.stderr


def installed_unit(directory, watchdog=None):
    """The shipped unit with ExecStart at the rankrun under test and the env files in `directory`."""
    text = UNIT.read_text()
    if watchdog:
        assert "#WatchdogSec=" in text
        text = re.sub(r"#WatchdogSec=.*", f"WatchdogSec={watchdog}", text)
    assert "ExecStart=/usr/bin/rankrun $RANKRUN_ARGS" in text
    assert "EnvironmentFile=/etc/rankrun/%i.env" in text
    text = text.replace("ExecStart=/usr/bin/rankrun", f"ExecStart={RANKRUN}")
    return text.replace("EnvironmentFile=/etc/rankrun/", f"EnvironmentFile={directory}/")


def cgroup2_mount():
    for line in Path("/proc/self/mounts").read_text().splitlines():
        f = line.split()
        if len(f) > 2 and f[2] == "cgroup2":
            return f[1]
    return None


class Manager:
    """A private `systemd --user`, ended by pid; its cgroups removed."""

    def __init__(self):
        self.cg = f"ci-sd-{os.getpid()}-{int(time.time() * 1000) % 100000}"
        self.dir = Path(tempfile.mkdtemp(prefix="rankrun-sd-"))
        self.dir.chmod(0o700)
        self.proc = None
        self.unit_dir.mkdir(parents=True)
        for h in HIERARCHIES:
            os.mkdir(f"/sys/fs/cgroup/{h}/{self.cg}")
        script = "".join(f'echo $$ > /sys/fs/cgroup/{h}/{self.cg}/cgroup.procs && ' for h in HIERARCHIES)
        script += ("mount -t tmpfs tmpfs /run/systemd && mkdir /run/systemd/system && "
                   f"exec {SYSTEMD} --user --log-target=console --log-level=warning")
        self.log = open(self.dir / "manager.log", "w")
        self.proc = subprocess.Popen(["unshare", "-m", "--propagation", "private", "bash", "-c", script],
                                     env=self.env(), stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            r = self.ctl("is-system-running", check=False)
            if r.stdout.strip() in ("running", "degraded"):
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        self.close()
        raise RuntimeError("the private systemd --user did not start: " + (self.dir / "manager.log").read_text())

    def env(self):
        # Everything the manager and systemctl write stays in self.dir (never in ~/.config).
        return dict(os.environ, XDG_RUNTIME_DIR=str(self.dir), XDG_CONFIG_HOME=str(self.dir / "config"),
                    XDG_DATA_HOME=str(self.dir / "data"), XDG_STATE_HOME=str(self.dir / "state"),
                    XDG_CACHE_HOME=str(self.dir / "cache"), SYSTEMD_PAGER="", SYSTEMD_COLORS="0")

    @property
    def unit_dir(self):
        return self.dir / "config" / "systemd" / "user"

    def ctl(self, *args, check=True, timeout=60):
        cmd = ["nsenter", "-t", str(self.proc.pid), "-m", "systemctl", "--user", *args]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=self.env())
        if check:
            assert r.returncode == 0, f"{args}: {r.stderr}"
        return r

    def show(self, unit, *props):
        r = self.ctl("show", unit, "-p", ",".join(props))
        return dict(line.split("=", 1) for line in r.stdout.splitlines() if "=" in line)

    def wait_state(self, unit, states, seconds=30):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            s = self.show(unit, "ActiveState", "SubState", "StatusText")
            if s["ActiveState"] in states:
                return s
            time.sleep(0.05)
        raise AssertionError(f"{unit} not in {states}: {s}")

    def close(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        for h in HIERARCHIES:
            top = Path(f"/sys/fs/cgroup/{h}/{self.cg}")
            if not top.exists():
                continue
            # Stragglers back to the parent, then the subtree bottom-up.
            for procs in top.rglob("cgroup.procs"):
                for pid in procs.read_text().split():
                    try:
                        Path(f"/sys/fs/cgroup/{h}/cgroup.procs").write_text(pid)
                    except OSError:
                        pass
            for d in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)) + [top]:
                try:
                    d.rmdir()
                except OSError:
                    pass
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def manager():
    if os.geteuid() != 0:
        pytest.skip("needs root (a private systemd --user in its own cgroup and mount namespace)")
    if not SYSTEMD.exists() or shutil.which("systemctl") is None or shutil.which("nsenter") is None:
        pytest.skip("systemd (/lib/systemd/systemd, systemctl) or nsenter is not installed")
    missing = [h for h in HIERARCHIES if not Path(f"/sys/fs/cgroup/{h}").is_dir()]
    if missing or cgroup2_mount() != "/sys/fs/cgroup/unified":
        pytest.skip(f"the private-manager recipe expects the hybrid cgroup layout (missing: {missing})")
    if not RANKRUN.exists():
        pytest.skip(f"{RANKRUN} is not built")
    m = Manager()
    try:
        # WatchdogSec=2: rankrun must send WATCHDOG=1 (every second) or systemd kills it.
        (m.unit_dir / "rankrun@.service").write_text(installed_unit(m.dir, watchdog=2))
        m.ctl("daemon-reload")
        yield m
    finally:
        m.close()


def pid_alive(pid):
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def cgroup_of(pid):
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        if line.startswith("0::"):
            return line[3:]
    return None


def write_job(m, name, args, sleep=60):
    (m.dir / "worker.py").write_text(WORKER)
    (m.dir / f"{name}.env").write_text(
        f'RANKRUN_ARGS="{args} {m.dir}/worker.py {m.dir}/{name} {sleep}"\nPYTHON_EXEC={PYTHON}\n')
    (m.dir / name).mkdir()


def test_service_ready_status_stop(manager):
    m = manager
    unit = "rankrun@job1.service"
    write_job(m, "job1", "--nproc-per-node=2 --term-timeout=5")
    t0 = time.monotonic()
    # Type=notify: `start` returns once rankrun sent READY=1, after both workers were started.
    m.ctl("start", unit, timeout=60)
    s = m.show(unit, "ActiveState", "StatusText", "MainPID", "ControlGroup", "NotifyAccess", "Type")
    assert s["ActiveState"] == "active", s
    assert s["Type"] == "notify" and s["NotifyAccess"] == "main", s
    assert re.match(r"running: 2 ranks on this node \(attempt 0, 0 restarts of 0\)", s["StatusText"]), s
    main = int(s["MainPID"])
    svc = s["ControlGroup"]
    # Both workers run: each wrote its file.
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and len(list((m.dir / "job1").glob("started-[0-9]"))) < 2:
        time.sleep(0.05)
    workers = [int(p.read_text()) for p in (m.dir / "job1").glob("started-[0-9]")]
    assert len(workers) == 2
    # Delegate=yes: rankrun in <service>/supervisor, the workers in <service>/rankrun-<id>.
    assert cgroup_of(main) == svc + "/supervisor"
    for w in workers:
        assert re.fullmatch(re.escape(svc) + r"/rankrun-[^/]+", cgroup_of(w)), cgroup_of(w)
    job_cgroup = Path("/sys/fs/cgroup/unified" + cgroup_of(workers[0]))
    assert job_cgroup.is_dir()
    # Past WatchdogSec=2: still running, thanks to WATCHDOG=1.
    time.sleep(2.5)
    s = m.show(unit, "ActiveState", "MainPID", "WatchdogTimestampMonotonic")
    assert s["ActiveState"] == "active" and int(s["MainPID"]) == main, s

    m.ctl("stop", unit, timeout=60)
    s = m.show(unit, "ActiveState", "Result")
    assert s["ActiveState"] in ("inactive", "failed"), s
    for pid in workers + [main]:
        assert not pid_alive(pid), pid
    assert not job_cgroup.exists()
    assert not Path("/sys/fs/cgroup/unified" + svc).exists()
    leftovers = list(Path(f"/sys/fs/cgroup/unified/{m.cg}").rglob("rankrun-*"))
    assert leftovers == []
    assert time.monotonic() - t0 < 30


def test_service_not_active_before_ready(manager):
    m = manager
    unit = "rankrun@waiting.service"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # Node 0 of 2 alone: it waits for the other node, so it never sends READY=1.
    write_job(m, "waiting", f"--nnodes=2 --node-rank=0 --master-addr=127.0.0.1 --master-port={port} --nproc-per-node=1")
    m.ctl("start", "--no-block", unit)
    deadline = time.monotonic() + 20
    while True:
        s = m.show(unit, "ActiveState", "StatusText", "MainPID")
        if s["StatusText"].startswith("waiting for nodes"):
            break
        assert time.monotonic() < deadline, s
        time.sleep(0.05)
    time.sleep(0.5)
    s = m.show(unit, "ActiveState", "StatusText", "MainPID")
    assert s["ActiveState"] == "activating", s
    assert s["StatusText"] == "waiting for nodes: rendezvous of 2 nodes (this is node 0)", s
    assert not list((m.dir / "waiting").glob("started-*"))
    main = int(s["MainPID"])
    m.ctl("stop", unit, timeout=60)
    assert m.show(unit, "ActiveState")["ActiveState"] in ("inactive", "failed")
    assert not pid_alive(main)
    assert list(Path(f"/sys/fs/cgroup/unified/{m.cg}").rglob("rankrun-*")) == []


def test_notify_messages_without_systemd(tmp_path):
    """The datagrams rankrun sends to $NOTIFY_SOCKET over a job's life, read from a socket the
    test binds (no systemd needed): READY=1 after the workers started, STATUS= lines,
    WATCHDOG=1, and on SIGTERM STOPPING=1 and EXTEND_TIMEOUT_USEC= for the grace."""
    if not RANKRUN.exists():
        pytest.skip(f"{RANKRUN} is not built")
    path = tmp_path / "notify"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.settimeout(10)
    (tmp_path / "job").mkdir()
    (tmp_path / "worker.py").write_text(WORKER)
    env = dict(os.environ, NOTIFY_SOCKET=str(path), WATCHDOG_USEC="400000", PYTHON_EXEC=PYTHON)
    env.pop("WATCHDOG_PID", None)
    proc = subprocess.Popen([str(RANKRUN), "--nproc-per-node=2", "--term-timeout=7", str(tmp_path / "worker.py"),
                             str(tmp_path / "job"), "60"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    messages = []
    try:
        def until(pred):
            while not any(pred(m) for m in messages):
                messages.append(sock.recv(4096).decode())
        until(lambda m: m.startswith("READY=1"))
        ready = next(m for m in messages if m.startswith("READY=1"))
        assert ready.startswith("READY=1\nSTATUS=running: 2 ranks on this node (attempt 0"), ready
        messages.clear()
        until(lambda m: m == "WATCHDOG=1")
        proc.send_signal(signal.SIGTERM)
        until(lambda m: m.startswith("EXTEND_TIMEOUT_USEC="))
        until(lambda m: "done: exit code" in m)
        assert proc.wait(timeout=30) != 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        sock.close()
    stopping = [m for m in messages if m.startswith("STOPPING=1")]
    assert stopping and stopping[0].startswith("STOPPING=1\nSTATUS=stopping: received SIGTERM"), messages
    assert "EXTEND_TIMEOUT_USEC=20000000" in messages, messages  # 7 s grace + 3 s kill + 10 s
    assert messages.index(stopping[0]) < messages.index("EXTEND_TIMEOUT_USEC=20000000")
