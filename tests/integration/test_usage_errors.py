"""Usage and configuration errors: rankrun exits 2 with a `rankrun: error:` line that names the
bad value, and leaves nothing behind: no run directory in $TMPDIR and no process of the job.

The job's processes are found by their RANKRUN_JOB marker: rankrun appends its own id to the one
it inherits, so every process it starts (guardian, workers and their children) carries the id
the test gave it."""
import os
import signal
import socket
import time
import uuid
from types import SimpleNamespace

import pytest

from harness import pids_alive, run

USAGE = 2


def carrying(marker):
    """Live processes whose RANKRUN_JOB lists `marker`."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                environ = f.read().split(b"\0")
        except OSError:
            continue
        for entry in environ:
            if entry.startswith(b"RANKRUN_JOB=") and marker.encode() in entry[len(b"RANKRUN_JOB="):].split(b":"):
                found.append(int(pid))
    return pids_alive(found)


@pytest.fixture
def job(tmp_path):
    """A fresh empty TMPDIR and a job marker; whatever carries the marker is killed at teardown."""
    j = SimpleNamespace(marker=f"usage-{uuid.uuid4().hex}", tmpdir=tmp_path / "tmpdir")
    j.tmpdir.mkdir()
    yield j
    for pid in carrying(j.marker):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def survivors(marker, seconds=5):
    """The job's processes still alive once they had `seconds` to exit on their own."""
    deadline = time.monotonic() + seconds
    while carrying(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    return carrying(marker)


def assert_usage_error(job, args, needle):
    r = run(args, env={"TMPDIR": str(job.tmpdir), "RANKRUN_JOB": job.marker}, timeout=30)
    assert r.returncode == USAGE, r
    errors = [line for line in r.stderr.splitlines() if line.startswith("rankrun: error: ")]
    assert any(needle in line for line in errors), f"no 'rankrun: error:' line with {needle!r}\n{r}"
    assert r.stdout == "", r  # no worker ran
    # Both checks are made before either is asserted: a failure names everything left behind.
    left = sorted(str(p.relative_to(job.tmpdir)) for p in job.tmpdir.rglob("*"))
    alive = survivors(job.marker)
    assert left == [] and alive == [], f"left in TMPDIR: {left}; processes of the job alive: {alive}\n{r}"


def test_program_that_does_not_exist(job):
    assert_usage_error(job, ["--no-python", "/nonexistent/prog"], "'/nonexistent/prog'")


def test_unknown_store_protocol(job):
    assert_usage_error(job, ["--store-protocol=9.9", "--no-python", "true"], "--store-protocol=9.9")


def test_more_workers_than_gpus(job):
    assert_usage_error(job, ["--nproc-per-node=3", "--gpus", "0,1", "--no-python", "true"], "--nproc-per-node=3")


def test_program_that_is_not_executable(job, tmp_path):
    program = tmp_path / "not_executable.sh"
    program.write_text("#!/bin/sh\nexit 0\n")
    program.chmod(0o644)
    assert_usage_error(job, ["--no-python", program], f"'{program}' is not executable")


def test_master_port_taken(job):
    with socket.socket() as held:
        held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        assert_usage_error(job, [f"--master-port={port}", "--no-python", "true"], f"127.0.0.1:{port}")


def etcd_args(conf):
    return ["--nnodes=2", "--rdzv-backend=etcd", "--rdzv-endpoint=127.0.0.1:1", f"--rdzv-conf={conf}",
            "--no-python", "true"]


def test_etcd_password_file_that_others_can_read(job, tmp_path):
    """etcd's password in a file other users may read is refused, with the fix, before anything
    starts; the same file made private passes this check (the job then fails to reach etcd,
    which is not what this test is about)."""
    pw = tmp_path / "etcd.password"
    pw.write_text("secret\n")
    pw.chmod(0o644)
    assert_usage_error(job, etcd_args(f"user=job,password_file={pw}"),
                       f"--rdzv-conf password_file={pw}: other users may read it (mode 0644); make it yours alone: "
                       f"chmod 600 {pw}")
    pw.chmod(0o620)
    assert_usage_error(job, etcd_args(f"user=job,password_file={pw}"), "other users may change it (mode 0620)")
    assert_usage_error(job, etcd_args("user=job,password=secret"), "--rdzv-conf password= would show etcd's password")


def test_etcd_tls_files_are_checked_before_anything_starts(job, tmp_path):
    """A missing CA file, or a certificate file that holds no certificate, is named with the
    problem at once (exit 2), not found at the first connect."""
    assert_usage_error(job, etcd_args("cacert=/nonexistent/ca.pem"),
                       "--rdzv-conf cacert=/nonexistent/ca.pem: cannot read it: No such file or directory")
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    assert_usage_error(job, etcd_args(f"protocol=https,cacert={junk}"),
                       f"--rdzv-conf cacert={junk}: holds no PEM certificate")
