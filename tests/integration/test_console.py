"""rankrun's output when the console or the disk does not keep up: a console nobody reads costs
output, never the job (the store keeps serving, signals stop the job, rankrun exits), and says
what it lost once it drains; a log file on a full disk is reported once and the job goes on; a
run directory that cannot hold the Python stack hook is an error before any worker starts."""
import errno
import os
import re
import signal
import subprocess
import threading
import time

import pytest

from harness import PYTHON, RANKRUN, have_torch, run

LINE_BYTES = 200 * 1024
LINES = 100
# Each rank says where the store is, floods stdout and stderr with long lines (far more than a
# pipe and rankrun's queue hold), says it is done, then waits to be stopped.
FLOOD = f"""
import os, sys, time
def say(name, text):
    path = os.path.join(os.environ["DONE_DIR"], name)
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.rename(path + ".tmp", path)
say("store-" + os.environ["RANK"], os.environ["MASTER_ADDR"] + " " + os.environ["MASTER_PORT"])
line = "x" * {LINE_BYTES}
for i in range({LINES}):
    print(i, line, flush=True)
    print(i, line, file=sys.stderr, flush=True)
say("done-" + os.environ["RANK"], "")
time.sleep(300)
"""
# A set and a get on the store, each given 5 s.
STORE_PROBE = """
import sys
from datetime import timedelta
import torch.distributed as dist
# use_libuv=False where torch has it: a torch built without libuv (Debian's 2.x) refuses the default.
no_libuv = {"use_libuv": False} if "use_libuv" in (dist.TCPStore.__init__.__doc__ or "") else {}
store = dist.TCPStore(sys.argv[1], int(sys.argv[2]), None, False, timedelta(seconds=5), **no_libuv)
store.set("console-test", "still serving")
print(store.get("console-test").decode())
"""
WORKER_LINE = re.compile(rf"^\[[01]\] \d+ x{{{LINE_BYTES}}}$")
DROPPED = re.compile(r"^rankrun: the console did not keep up: (\d+) lines? \((\d+) bytes?\) of output (?:was|were) dropped$")


def start_flood(done_dir):
    env = dict(os.environ, DONE_DIR=str(done_dir), PYTHON_EXEC=PYTHON)
    env.pop("CUDA_VISIBLE_DEVICES", None)
    env.pop("NO_COLOR", None)
    return subprocess.Popen([str(RANKRUN), "--nproc-per-node=2", "--no-python", PYTHON, "-c", FLOOD],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)


def wait_for(proc, done_dir, names, timeout):
    """Whether every rank wrote its file `names`-<rank> within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not all((done_dir / f"{names}-{r}").exists() for r in ("0", "1")):
        assert proc.poll() is None, f"rankrun exited {proc.returncode} while its workers ran"
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def store_address(proc, done_dir):
    assert wait_for(proc, done_dir, "store", 60), "the workers did not start"
    addr, port = (done_dir / "store-0").read_text().split()
    return addr, int(port)


def wait_until_flooded(proc, done_dir):
    """Both ranks printed everything: rankrun read it all (the workers' pipes are small) while
    nobody read rankrun's."""
    assert wait_for(proc, done_dir, "done", 60), "the workers could not finish printing: rankrun stopped reading them"


def stop(proc):
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def test_a_console_nobody_reads_costs_output_not_the_job(tmp_path):
    proc = start_flood(tmp_path)
    try:
        addr, port = store_address(proc, tmp_path)
        # rankrun's stdout and stderr fill up, nobody reads them; the event loop still serves the
        # store (a blocked loop answers nothing, and the other nodes of a job would give up).
        time.sleep(2)
        if have_torch():
            # In a process of its own: torch's client aborts its process when the server goes.
            probe = subprocess.run([PYTHON, "-c", STORE_PROBE, addr, str(port)], capture_output=True, text=True, timeout=120)
            assert probe.returncode == 0 and probe.stdout == "still serving\n", (
                f"the store did not answer while rankrun's console was stuck:\n{probe.stdout}{probe.stderr}")
        wait_until_flooded(proc, tmp_path)
        # And a SIGTERM stops the job: rankrun exits within its bound for the console (2 s)
        # plus the workers' stop, with the code the job decided.
        began = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            pytest.fail("rankrun did not exit on SIGTERM while its console was stuck")
        assert code == 128 + signal.SIGTERM
        assert time.monotonic() - began < 8
        out = proc.stdout.read().decode(errors="replace")
        assert out.startswith("[0] ") or out.startswith("[1] "), out[:200]
    finally:
        stop(proc)


def test_a_console_that_catches_up_says_what_was_dropped(tmp_path):
    proc = start_flood(tmp_path)
    chunks = {"out": [], "err": []}
    readers = []
    try:
        store_address(proc, tmp_path)
        wait_until_flooded(proc, tmp_path)
        # Now someone reads: what rankrun queued comes out, then a line per stream with what it
        # had to drop.
        for name, stream in (("out", proc.stdout), ("err", proc.stderr)):
            t = threading.Thread(target=lambda s=stream, c=chunks[name]: c.extend(iter(lambda: s.read1(1 << 20), b"")))
            t.start()
            readers.append(t)
        deadline = time.monotonic() + 30
        while not all(b"did not keep up" in b"".join(list(c)) for c in chunks.values()):
            assert time.monotonic() < deadline, "no line says what was dropped"
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 128 + signal.SIGTERM
    finally:
        stop(proc)
        for t in readers:
            t.join(timeout=10)
    for name in ("out", "err"):
        lines = b"".join(chunks[name]).decode(errors="replace").splitlines()
        notices = [DROPPED.match(l) for l in lines if "did not keep up" in l]
        assert len(notices) >= 1 and all(notices), [l[:200] for l in lines if "did not keep up" in l]
        dropped_lines = sum(int(m.group(1)) for m in notices)
        dropped_bytes = sum(int(m.group(2)) for m in notices)
        assert dropped_lines > 0 and dropped_bytes >= dropped_lines * LINE_BYTES
        # Lines are dropped whole: every worker line that came out is complete.
        worker = [l for l in lines if l.startswith("[")]
        assert worker and all(WORKER_LINE.match(l) for l in worker), [l[:80] for l in worker if not WORKER_LINE.match(l)]
        # Whatever came out, plus what was dropped, is every line the ranks printed.
        assert len(worker) + dropped_lines == 2 * LINES
        if name == "err":
            # rankrun's own lines were not among the casualties: the stop and the summary are there.
            assert any("received SIGTERM" in l for l in lines)
            assert any("exit code 143" in l for l in lines)


@pytest.fixture
def small_disk(tmp_path):
    """A 256 KiB tmpfs, unmounted at the end whatever happened."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mnt = tmp_path / "small"
    mnt.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {mounted.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(directory):
    """Fills the file system of `directory` up to its last byte."""
    with open(directory / "fill", "wb", buffering=0) as f:
        while True:
            try:
                f.write(b"\0" * 4096)
            except OSError as e:
                assert e.errno == errno.ENOSPC
                return


# Each rank writes about 300 KB to each stream: every one of the four files runs out of room.
CHATTY = """
import sys
for i in range(3000):
    print("o" * 99)
    print("e" * 99, file=sys.stderr)
"""


def test_log_files_on_a_full_disk_are_reported_once_and_the_job_goes_on(small_disk):
    r = run(["--nproc-per-node", "2", "--log-dir", small_disk, "-r", "3", "--no-python", PYTHON, "-c", CHATTY], timeout=60)
    assert r.returncode == 0, r
    assert "exit code 0" in r.stderr, r
    errors = [l for l in r.stderr.splitlines() if l.startswith("rankrun: error: ")]
    for rank in (0, 1):
        for name in ("stdout.log", "stderr.log"):
            about = [l for l in errors if f"/attempt_0/{rank}/{name}:" in l]
            assert len(about) == 1, r
            assert "No space left on device" in about[0], r
    assert len(errors) == 4, r
    assert r.stdout == "", r  # --redirects=3: the workers' output went to the files only


def test_a_log_dir_that_cannot_hold_the_stack_hook_is_an_error_before_any_worker(small_disk, tmp_path):
    fill(small_disk)
    marker = tmp_path / "worker-ran"
    r = run(["--nproc-per-node", "2", "--log-dir", small_disk, "--no-python", "/usr/bin/touch", marker], timeout=30)
    assert r.returncode == 2, r
    errors = [l for l in r.stderr.splitlines() if l.startswith("rankrun: error: ")]
    assert len(errors) == 1, r
    assert "sitecustomize.py" in errors[0] and "No space left on device" in errors[0], r
    assert f"free space in {small_disk} or give another --log-dir" in errors[0], r
    assert not marker.exists(), "a worker started"
    # Nothing is left behind: the run directory is gone again.
    assert sorted(p.name for p in small_disk.iterdir()) == ["fill"], r
