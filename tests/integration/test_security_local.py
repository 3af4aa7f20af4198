"""Another user of the same host against a root rankrun (issue 24, "the job admits only its own").

Each test makes an unprivileged user of its own (removed at teardown, whatever happened) and
runs the attacker's steps as that user (setpriv). The attacks:

- a --log-dir the attacker may write (a group-shared directory without the sticky bit): they
  rename rankrun's run directory and put their own python/sitecustomize.py in its place, so the
  restarted root worker runs it. rankrun refuses such a directory before it makes anything; a
  sticky world-writable one (/tmp's kind) is fine, and the same attack fails there.
- a link (or a directory of their own) planted where the log directory is to be made, in a
  sticky directory: rankrun would follow it wherever it points. Refused.
- a /dev/shm file named after a worker's pid (torch_<pid>_x): rankrun removes the job's
  segments at exit, but not another user's file, and not one named after a pid that is not the
  named process's own (a process of another pid namespace).

Inside the run directory (0700) only rankrun's own user writes: a worker. A link it plants
where rankrun is about to write is not written through either.
"""
import os
import pwd
import re
import secrets
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from harness import PYTHON, Running, run

SHM = Path("/dev/shm")

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("useradd") or not shutil.which("setpriv"),
                                reason="needs root, useradd and setpriv to act as another user")


class User:
    def __init__(self, name):
        pw = pwd.getpwnam(name)
        self.name, self.uid, self.gid = name, pw.pw_uid, pw.pw_gid

    def run(self, args, **kw):
        """`args` as this user, with its own group only."""
        return subprocess.run(["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--clear-groups", "--", *args],
                              capture_output=True, text=True, timeout=30, **kw)


def _retry(args):
    # Another test on the host may hold the lock on /etc/passwd for a moment.
    for _ in range(50):
        r = subprocess.run(args, capture_output=True, text=True)
        if r.returncode == 0 or "lock" not in r.stderr:
            return r
        time.sleep(0.1)
    return r


@pytest.fixture
def outsider():
    """An unprivileged user with a group of its own, made for this test only."""
    name = "rrsec" + secrets.token_hex(4)
    r = _retry(["useradd", "--no-create-home", "--user-group", "--shell", "/usr/sbin/nologin", name])
    assert r.returncode == 0, r.stderr
    try:
        yield User(name)
    finally:
        _retry(["userdel", name])
        if subprocess.run(["getent", "group", name], capture_output=True).returncode == 0:
            _retry(["groupdel", name])


@pytest.fixture
def shared():
    """A directory under /tmp every user can reach (the test's own tmp_path is root's alone)."""
    d = Path(tempfile.mkdtemp(prefix="rankrun-sec-", dir="/tmp"))
    os.chmod(d, 0o755)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


# Attempt 0 waits for `go` and fails; rankrun restarts it, and attempt 1's interpreter loads
# whatever sitecustomize.py its PYTHONPATH (into the run directory) finds.
RESTARTED = """
import os, sys, time
if os.environ["TORCHELASTIC_RESTART_COUNT"] == "0":
    deadline = time.time() + 20
    while not os.path.exists(sys.argv[1]) and time.time() < deadline:
        time.sleep(0.05)
    sys.exit(1)
print("attempt 1 ran")
"""

# The attacker's steps: every run directory in the log directory is moved away and replaced by
# one of their own that holds their sitecustomize.py.
SWAP = r"""
set -u
status=0
for d in "$1"/*_*; do
  [ -d "$d" ] || continue
  mv "$d" "$d.moved" || { status=3; continue; }
  mkdir -p "$d/python" && cp "$2" "$d/python/sitecustomize.py" || status=4
done
exit $status
"""


def wait_for_run_dir(logs, job, seconds=10):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and job.proc.poll() is None:
        found = [p for p in logs.glob("*_*") if p.is_dir()]
        if found:
            return found
        time.sleep(0.02)
    return []


def attack_during_restart(outsider, logs, tmp_path, shared):
    """Starts a job with --log-dir `logs` that restarts once; as soon as its run directory
    exists, the outsider swaps it for theirs; then attempt 0 fails. Returns (the job's result,
    the outsider's result or None when no run directory appeared, the root-only marker their
    code would write)."""
    pwned = tmp_path / "pwned"  # tmp_path is root's alone: only code running as root writes here
    evil = shared / "evil_sitecustomize.py"
    evil.write_text(f"open({str(pwned)!r}, 'w').write('the outsider ran this')\n")
    os.chmod(evil, 0o644)
    swap = shared / "swap.sh"
    swap.write_text(SWAP)
    os.chmod(swap, 0o755)
    script = tmp_path / "restarted.py"
    script.write_text(RESTARTED)
    go = tmp_path / "go"
    job = Running(["--nproc-per-node", "1", "--max-restarts", "1", "--log-dir", logs, "--rdzv-id", "sec", script, go])
    try:
        attacker = None
        if wait_for_run_dir(logs, job):
            attacker = outsider.run(["sh", str(swap), str(logs), str(evil)])
        go.touch()
        result = job.finish(timeout=60)
    finally:
        if job.proc.poll() is None:
            job.proc.kill()
            job.proc.wait()
    return result, attacker, pwned


def assert_refused(r, fragments):
    assert r.returncode == 2, r
    errors = [l for l in r.stderr.splitlines() if l.startswith("rankrun: error: ")]
    assert len(errors) == 1, r
    for fragment in fragments:
        assert fragment in errors[0], r


def test_a_log_dir_another_user_may_write_is_refused_before_anything_exists(outsider, shared, tmp_path):
    logs = shared / "team-logs"  # group-shared with the outsider, no sticky bit
    logs.mkdir()
    os.chown(logs, 0, outsider.gid)
    os.chmod(logs, 0o775)
    r, attacker, pwned = attack_during_restart(outsider, logs, tmp_path, shared)
    assert not pwned.exists(), f"the outsider's sitecustomize.py ran as root\n{r}\n{attacker and attacker.stderr}"
    assert_refused(r, [f"--log-dir {logs} is writable by its group and has no sticky bit",
                       f"`chmod o-w,g-w {logs}`", f"`chmod +t {logs}`", "or give another --log-dir"])
    assert list(logs.iterdir()) == [], "rankrun made something in the refused directory"
    assert "attempt 1 ran" not in r.stdout, r


def test_check_says_so_too_and_makes_nothing(outsider, shared):
    logs = shared / "team-logs"
    logs.mkdir()
    os.chown(logs, 0, outsider.gid)
    os.chmod(logs, 0o775)
    r = run(["--check", "--no-python", "--log-dir", logs, "/usr/bin/true"], timeout=60)
    assert r.returncode == 2, r
    out = r.stdout + r.stderr
    assert f"FAIL run directory: --log-dir {logs} is writable by its group and has no sticky bit" in out, r
    assert f"fix: run `chmod o-w,g-w {logs}` or `chmod +t {logs}`, or give another --log-dir" in out, r
    assert list(logs.iterdir()) == [], r


def test_a_sticky_world_writable_log_dir_works_and_the_swap_fails_there(outsider, shared, tmp_path):
    logs = shared / "everyone"  # like /tmp: everyone may write, the sticky bit keeps entries their owners'
    logs.mkdir()
    os.chmod(logs, 0o1777)
    r, attacker, pwned = attack_during_restart(outsider, logs, tmp_path, shared)
    assert not pwned.exists(), f"the outsider's sitecustomize.py ran as root\n{r}\n{attacker and attacker.stderr}"
    assert r.returncode == 0, r
    assert "attempt 1 ran" in r.stdout, r
    assert attacker is not None, r
    assert attacker.returncode == 3 and "Operation not permitted" in attacker.stderr, attacker
    run_dirs = [p for p in logs.glob("sec_*") if p.is_dir()]
    assert len(run_dirs) == 1, list(logs.iterdir())
    assert (run_dirs[0] / "attempt_1" / "0").is_dir(), r
    assert oct(run_dirs[0].stat().st_mode & 0o777) == oct(0o700)
    assert "the outsider" not in (run_dirs[0] / "python" / "sitecustomize.py").read_text()


@pytest.mark.parametrize("planted", ["link", "directory"])
def test_what_another_user_plants_where_the_log_dir_goes_is_not_used(outsider, shared, tmp_path, planted):
    """The user asks for --log-dir STICKY/logs, which does not exist yet; the outsider makes it
    first: a link to a directory of rankrun's choosing (root's, 0755: trusted in itself), or a
    directory of their own."""
    sticky = shared / "everyone"
    sticky.mkdir()
    os.chmod(sticky, 0o1777)
    target = shared / "somewhere-root-owns"
    target.mkdir()
    logs = sticky / "logs"
    made = outsider.run(["ln", "-s", str(target), str(logs)] if planted == "link" else ["mkdir", "-m", "755", str(logs)])
    assert made.returncode == 0, made.stderr
    marker = tmp_path / "worker-ran"
    r = run(["--nproc-per-node", "1", "--log-dir", logs, "--no-python", "/usr/bin/touch", marker], timeout=30)
    what = "a symbolic link on the way to it, is owned by" if planted == "link" else "is owned by"
    assert_refused(r, [f"--log-dir {logs}", what, f"{outsider.name} (uid {outsider.uid})"])
    assert not marker.exists(), r
    assert list(target.iterdir()) == [], "rankrun followed the outsider's link"
    if planted == "directory":
        assert list(logs.iterdir()) == [], r


# Rank 1 plants a link where rankrun will save its stack when the hang is diagnosed, then blocks;
# rank 0 exits, so the job is hung after --exit-timeout.
PLANTS_A_LINK = """
import os, sys, time
if os.environ["RANK"] == "0":
    sys.exit(0)
os.symlink(sys.argv[1], os.path.join(os.path.dirname(os.environ["TORCHELASTIC_ERROR_FILE"]), "stacks.txt"))
time.sleep(60)
"""


def test_a_link_a_worker_plants_in_the_run_directory_is_not_written_through(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious")
    script = tmp_path / "plants.py"
    script.write_text(PLANTS_A_LINK)
    logs = tmp_path / "logs"
    r = run(["--nproc-per-node", "2", "--exit-timeout", "2", "--log-dir", logs, "--rdzv-id", "plant", script, victim],
            timeout=90)
    assert r.returncode == 124, r  # hung
    assert victim.read_text() == "precious", r
    assert "stack of rank 1" in r.stderr, r  # the stack still reached the console
    assert re.search(r"cannot write \S+/plant_\w+/attempt_0/1/stacks\.txt \(File exists\): the stack is on the "
                     r"console only", r.stderr), r


# --- /dev/shm ----------------------------------------------------------------------------------

# The worker makes a segment of its own (the job's: removed at exit), says its pid, and waits.
SHM_WORKER = 'echo "worker pid=$$"; : > /dev/shm/torch_$$_own; while [ ! -e "$1" ]; do sleep 0.05; done'


@pytest.fixture
def segments():
    names = set()
    yield names
    for name in names:
        try:
            (SHM / name).unlink()
        except FileNotFoundError:
            pass


def test_another_users_segment_named_after_a_worker_is_left(outsider, segments, tmp_path):
    go = tmp_path / "go"
    job = Running(["-vv", "--nproc-per-node", "1", "--no-python", "sh", "-c", SHM_WORKER, "sh", go])
    try:
        job.wait_for_lines(r"worker pid=\d+", 1)
        pid = int(re.search(r"worker pid=(\d+)", "".join(job.seen)).group(1))
        own, theirs = f"torch_{pid}_own", f"torch_{pid}_x"
        segments.update([own, theirs])
        made = outsider.run(["sh", "-c", f": > /dev/shm/{theirs}"])
        assert made.returncode == 0, made.stderr
        go.touch()
        r = job.finish(timeout=30)
    finally:
        if job.proc.poll() is None:
            job.proc.kill()
            job.proc.wait()
    assert r.returncode == 0, r
    assert (SHM / theirs).exists(), f"root rankrun removed {outsider.name}'s file\n{r}"
    assert (SHM / theirs).stat().st_uid == outsider.uid
    assert not (SHM / own).exists(), f"the job's own segment was left\n{r}"
    assert f"left /dev/shm/{theirs}: it is owned by uid {outsider.uid}, but pid {pid} of the job creates files as uid 0" \
        in r.stderr, r
    assert "removed 1 shared-memory segment" in r.stderr, r


# A worker whose child lives in a pid namespace of its own: as rankrun sees pids it is some P,
# to itself it is 1. A segment named torch_P_... is not one it made.
NESTED_WORKER = 'unshare --pid --fork sh -c \'while [ ! -e "$1" ]; do sleep 0.05; done\' sh "$1"'


def test_a_segment_named_after_a_pid_that_is_not_its_processs_own_is_left(segments, tmp_path):
    if not shutil.which("unshare"):
        pytest.skip("needs unshare")
    go = tmp_path / "go"
    job = Running(["-vv", "--nproc-per-node", "1", "--no-python", "sh", "-c", NESTED_WORKER, "sh", go])
    try:
        line = job.wait_for_stderr(r"rank 0 \(local 0\) is pid \d+")
        worker = int(re.search(r"is pid (\d+)", line).group(1))
        nested = None
        deadline = time.monotonic() + 10
        while nested is None and time.monotonic() < deadline:
            # worker (sh) -> unshare -> the process in the new namespace
            for p in Path("/proc").iterdir():
                try:
                    status = (p / "status").read_text()
                except (OSError, ValueError):
                    continue
                ppid = re.search(r"^PPid:\s+(\d+)", status, re.M)
                nstgid = re.search(r"^NStgid:\s+(.*)$", status, re.M)
                if ppid and nstgid and len(nstgid.group(1).split()) == 2:
                    parent = (Path("/proc") / ppid.group(1) / "status")
                    try:
                        grand = re.search(r"^PPid:\s+(\d+)", parent.read_text(), re.M).group(1)
                    except (OSError, AttributeError):
                        continue
                    if int(grand) == worker:
                        nested = int(p.name)
            time.sleep(0.05)
        assert nested is not None, "the nested process did not start"
        name = f"torch_{nested}_x"
        segments.add(name)
        (SHM / name).touch()  # owned by root, like the workers: only the namespace tells
        go.touch()
        r = job.finish(timeout=30)
    finally:
        if job.proc.poll() is None:
            job.proc.kill()
            job.proc.wait()
    assert r.returncode == 0, r
    assert (SHM / name).exists(), f"rankrun removed a segment its named process could not have named\n{r}"
    assert f"left /dev/shm/{name}: pid {nested} of the job lives in another pid namespace (where it is pid 1)" in r.stderr, r
