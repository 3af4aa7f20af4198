"""Nothing of a job survives rankrun, whichever way it ends: no process (daemons, DataLoader
workers, torch_shm_manager), no /dev/shm segment the job created, no port a job process or
the store listened on. Every test checks /proc, /dev/shm and the ports directly, and cleans up
after itself by pid and name even when it fails."""
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from harness import BUILD, PYTHON, RANKRUN, SCRIPTS, Running, have_torch, pids_alive, run, torch_only

# The tests marked torch_commit run again with torch 2.14 in make test (conftest.py).

DIRTY = BUILD / "tests" / "helpers" / "dirty_worker"
SHM = Path("/dev/shm")
FREEZER = Path("/sys/fs/cgroup/freezer")


def start_time(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except OSError:
        return None


class Leftovers:
    """What a job made, learned from its output; removed at teardown whatever happened."""

    def __init__(self):
        self.pids = {}  # pid -> start time when first seen
        self.segments = set()
        self.ports = set()
        self.frozen = []  # freezer cgroup directories
        self.cgroups = []  # cgroup v2 directories to remove

    def learn(self, text):
        for kind, pid, port, shm in re.findall(r"(dirty|daemon) pid=(\d+) port=(\d+) shm=(\S+)", text):
            self.add_pid(int(pid))
            self.ports.add(int(port))
            self.segments.update(shm.split(","))

    def add_pid(self, pid):
        if pid not in self.pids:
            self.pids[pid] = start_time(int(pid))
            # The job cgroup rankrun made: removed here too, should rankrun fail to.
            try:
                with open(f"/proc/{pid}/cgroup") as f:
                    m = re.search(r"^0::(/.*rankrun-[0-9a-f]+)$", f.read(), re.M)
                if m:
                    d = Path(cgroup2_mount() + m.group(1))
                    if d not in self.cgroups:
                        self.cgroups.append(d)
            except (OSError, StopIteration):
                pass

    def alive(self):
        return pids_alive(self.pids)

    def present_segments(self):
        return sorted(s for s in self.segments if (SHM / s).exists())

    def teardown(self):
        for d in self.frozen:
            try:
                (d / "freezer.state").write_text("THAWED")
            except OSError:
                pass
        for pid, started in self.pids.items():
            if started is not None and start_time(pid) == started:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 5
        while self.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        for s in self.segments:
            try:
                (SHM / s).unlink()
            except FileNotFoundError:
                pass
        for d in self.frozen + self.cgroups:
            for _ in range(50):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.05)


@pytest.fixture
def leftovers():
    l = Leftovers()
    yield l
    l.teardown()


def cgroup2_mount():
    with open("/proc/self/mounts") as f:
        return next(l.split()[1] for l in f if l.split()[2] == "cgroup2")


def listening(port):
    """True when some socket listens on `port` (any address), from /proc/net/tcp{,6}."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    fields = line.split()
                    if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "0A":
                        return True
        except FileNotFoundError:
            pass
    return False


def store_port(stderr):
    m = re.search(r"store at [^ ]+:(\d+)", stderr)
    assert m, stderr
    return int(m.group(1))


def assert_nothing_left(l, result, workers=2):
    assert len(l.pids) == 2 * workers, f"expected every worker and daemon to report: {l.pids}\n{result}"
    assert l.alive() == [], f"still alive: {l.alive()}\n{result}"
    assert l.present_segments() == [], result
    for port in sorted(l.ports) + [store_port(result.stderr)]:
        assert not listening(port), f"port {port} is still bound\n{result}"
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def dirty(*args):
    return ["-v", "--nproc-per-node", "2", "--term-timeout", "1", "--no-python", DIRTY, *args]


def test_success_leaves_nothing(leftovers):
    r = run(dirty("exit", "0"))
    leftovers.learn(r.stdout)
    assert r.returncode == 0, r
    assert_nothing_left(leftovers, r)
    assert "cleanup: reaped 2 workers and 2 other processes, removed 6 shared-memory segments" in r.stderr, r


def test_failing_worker_leaves_nothing(leftovers):
    r = run(dirty("exit-if-rank", "1", "3"))
    leftovers.learn(r.stdout)
    assert r.returncode == 3, r
    assert_nothing_left(leftovers, r)
    assert "removed 6 shared-memory segments" in r.stderr, r


def start_dirty_job(leftovers, *extra):
    job = Running(dirty("sleep"))
    try:
        job.wait_for_lines(r"dirty pid=", 2)
    finally:
        leftovers.learn("".join(job.seen))
    return job


@pytest.mark.parametrize("signo", [signal.SIGINT, signal.SIGTERM])
def test_signal_to_rankrun_leaves_nothing(leftovers, signo):
    job = start_dirty_job(leftovers)
    job.signal(signo)
    r = job.finish()
    leftovers.learn(r.stdout)
    assert r.returncode == 128 + signo, r
    assert_nothing_left(leftovers, r)


def wait_until(condition, seconds):
    """Bounded polling, for the one path where nobody is left to wait for: rankrun SIGKILLed."""
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)
    return condition()


def test_sigkill_of_rankrun_leaves_nothing(leftovers, tmp_path):
    tmpdir = tmp_path / "tmpdir"
    tmpdir.mkdir()
    job = Running(dirty("sleep"), env={"TMPDIR": str(tmpdir)})
    try:
        job.wait_for_lines(r"dirty pid=", 2)
    finally:
        leftovers.learn("".join(job.seen))
    err_start = len(job.seen)
    job.proc.kill()
    r = job.finish()
    assert r.returncode == -signal.SIGKILL, r
    assert wait_until(lambda: not leftovers.alive(), 5), f"still alive: {leftovers.alive()}\n{r}"
    assert wait_until(lambda: not leftovers.present_segments(), 5), r
    for port in sorted(leftovers.ports):
        assert wait_until(lambda: not listening(port), 5), f"port {port} is still bound"
    assert "rankrun: guardian: rankrun ended without cleaning up" in r.stderr, r
    assert err_start > 0
    # rankrun's private run directory goes too
    assert wait_until(lambda: not list(tmpdir.iterdir()), 5), list(tmpdir.iterdir())


def start_outsider(leftovers):
    p = subprocess.Popen([str(DIRTY), "outsider"], stdout=subprocess.PIPE, text=True)
    leftovers.add_pid(p.pid)
    line = p.stdout.readline()
    m = re.search(r"shm=(\S+)", line)
    assert m, line
    leftovers.segments.add(m.group(1))
    return p, m.group(1)


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_segments_of_a_process_outside_the_job_are_left_alone(leftovers, how):
    job = start_dirty_job(leftovers)
    # Created while the job runs, named like the job's: only its creator tells it apart.
    outsider, name = start_outsider(leftovers)
    if how == "sigterm":
        job.signal(signal.SIGTERM)
        r = job.finish()
        assert r.returncode == 143, r
        assert_nothing_left_but(leftovers, r, outsider.pid, name)
    else:
        job.proc.kill()
        r = job.finish()
        assert wait_until(lambda: leftovers.alive() == [outsider.pid], 5), r
        assert wait_until(lambda: leftovers.present_segments() == [name], 5), r
    assert (SHM / name).exists()
    assert pids_alive([outsider.pid]) == [outsider.pid]
    outsider.kill()
    outsider.wait()


def assert_nothing_left_but(l, result, pid, segment):
    assert l.alive() == [pid], result
    assert l.present_segments() == [segment], result


def can_freeze():
    return os.geteuid() == 0 and (FREEZER / "tasks").exists()


@pytest.mark.skipif(not can_freeze(), reason="needs root and the cgroup v1 freezer")
def test_a_process_that_cannot_be_killed_is_reported_with_125(leftovers):
    job = start_dirty_job(leftovers)
    daemon = int(re.search(r"daemon pid=(\d+)", "".join(job.seen)).group(1))
    # A frozen task keeps SIGKILL pending, as one in uninterruptible sleep does.
    cg = FREEZER / f"rankrun-test-{os.getpid()}-{daemon}"
    cg.mkdir()
    leftovers.frozen.append(cg)
    (cg / "tasks").write_text(str(daemon))
    (cg / "freezer.state").write_text("FROZEN")
    job.signal(signal.SIGTERM)
    r = job.finish()
    assert r.returncode == 125, r
    assert f"pid {daemon} (dirty_worker) could not be killed: it is in state D (disk sleep)" in r.stderr, r




def job_processes(job_id):
    """Live processes carrying the job's marker."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if f"RANKRUN_JOB={job_id}".encode() in f.read():
                    found.append(int(pid))
        except OSError:
            pass
    return pids_alive(found)


@pytest.mark.torch_commit
@torch_only
@pytest.mark.parametrize("fail", [False, True])
def test_pytorch_dataloader_and_shm_manager_leave_nothing(leftovers, fail, tmp_path):
    env = {"FAIL_RANK": "1", "READY_DIR": str(tmp_path)} if fail else {}
    r = run(["-v", "--nproc-per-node", "2", SCRIPTS / "dataloader_shm.py"], env=env, timeout=180)
    creators = set()
    for rank in (0, 1):
        for line in r.lines(rank):
            m = re.search(r"pid=(\d+)", line)
            if m:
                creators.add(int(m.group(1)))
                leftovers.add_pid(int(m.group(1)))
    assert r.returncode == (1 if fail else 0), r
    job_id = re.search(r"job=(\w+)", "\n".join(r.lines(0))).group(1)
    managers = [int(l.split("=")[1]) for l in r.lines(0) if l.startswith("managers=")]
    assert managers and managers[0] >= 1, r  # torch_shm_manager ran
    assert len(creators) == 6, r  # two ranks, two loader workers each
    assert job_processes(job_id) == [], r
    assert pids_alive(creators) == [], r
    ours = [n for n in os.listdir(SHM) if re.match(r"torch_(\d+)_", n) and int(n.split("_")[1]) in creators]
    assert ours == [], r


@torch_only
@pytest.mark.parametrize("how", ["a rank fails", "rankrun SIGKILLed"])
def test_python_semaphores_of_a_stopped_rank_are_left_to_its_resource_tracker(how, tmp_path):
    """Both ranks' DataLoaders run with workers from a forkserver (Python 3.14's default). Then
    rank 1 raises and rank 0 is stopped with SIGTERM, or rankrun is SIGKILLed and its guardian
    ends the job. The named semaphores of the stopped ranks' loader queues (/dev/shm/sem.mp-*:
    names after no process) are left to each rank's multiprocessing resource tracker, which
    unlinks them once every other process of the job is gone: it is killed last. The job gets a
    /dev/shm of its own (a tmpfs in a private mount namespace), so that only its files count."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("needs root and unshare to mount a private /dev/shm")
    listing = tmp_path / "left"
    before = tmp_path / "before"
    out = tmp_path / "out"
    job = f"{RANKRUN} -v --nproc-per-node 2 {SCRIPTS / 'dataloader_shm.py'}"
    if how == "a rank fails":
        fail_rank = "1"
        run_it = f"{job} > {out} 2>&1; rc=$?"
    else:
        # no rank fails: both wait to be stopped once their loaders run; the guardian says when
        # it is done (its line goes to rankrun's stderr, which it shares)
        fail_rank = "9"
        # the output file exists before the job starts: the wait loop must not read a missing file
        # (a loop that ended at once killed rankrun before it had started)
        run_it = (f": > {out}; {job} >> {out} 2>&1 & pid=$!; i=0; "
                  f"while [ \"$(grep -c '^\\[.\\] managers=' {out})\" -lt 2 ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done; "
                  f"ls -A /dev/shm > {before}; kill -9 $pid; wait $pid; rc=$?; i=0; "
                  f"while ! grep -q 'rankrun: guardian: rankrun ended' {out} && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done")
    script = f"mount -t tmpfs rrtest-shm /dev/shm && {{ {run_it}; }}; ls -A /dev/shm > {listing}; exit $rc"
    ready = tmp_path / "ready"
    ready.mkdir()
    env = dict(os.environ, FAIL_RANK=fail_rank, READY_DIR=str(ready), LOADER_CONTEXT="forkserver",
               PYTHON_EXEC=str(PYTHON))
    env.pop("CUDA_VISIBLE_DEVICES", None)
    r = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script], capture_output=True,
                       text=True, env=env, timeout=240)
    text = out.read_text() + r.stderr
    assert r.returncode == (1 if how == "a rank fails" else 128 + signal.SIGKILL), (r.returncode, text)
    assert listing.read_text().split() == [], (listing.read_text(), text)
    # the semaphores were there: the tracker said it unlinked them, or (its output gone with
    # rankrun) they were listed before the kill
    if how == "a rank fails":
        assert re.search(r"There appear to be \d+ leaked semaphore objects to clean up", text), text
    else:
        assert "rankrun: guardian: rankrun ended without cleaning up" in text, text
        assert any(n.startswith("sem.mp-") for n in before.read_text().split()), (before.read_text(), text)
