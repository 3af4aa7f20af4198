"""`rankrun --check`: one line per check, the fix for each failure, exit 0 or 2, nothing started."""
import os
import socket
import stat

import re
import subprocess

import pytest

from harness import PYTHON, SCRIPTS, run, torch_only

# Its torch tests run again with torch 2.14 in make test (conftest.py: torch_commit).
pytestmark = pytest.mark.torch_commit

SCRIPT = SCRIPTS / "mn_fail.py"


def test_check_passes_here_and_starts_nothing(tmp_path):
    r = run(["--check", "--nproc-per-node", "2", SCRIPT], env={"TMPDIR": str(tmp_path)}, timeout=120)
    assert r.returncode == 0, r
    for what in ("GPUs:", "master address:", "store 127.0.0.1:", "/dev/shm:", "open files:", "python:", "RemoveIPC:"):
        assert f"ok   {what}" in r.stdout, r
    assert "rankrun --check: all" in r.stdout
    assert "ready rank" not in r.stdout  # no worker ran
    assert list(tmp_path.iterdir()) == []
    unified = "/sys/fs/cgroup/unified"
    if os.path.isdir(unified):  # the cgroup probe removes what it made
        assert not [d for d in os.listdir(unified) if d.startswith("rankrun-check-")]


def test_check_names_each_failure_and_its_fix(tmp_path):
    fake = tmp_path / "python-without-torch"
    fake.write_text("#!/bin/sh\necho \"ModuleNotFoundError: No module named 'torch'\" >&2\nexit 1\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        r = run(["--check", f"--master-port={port}", SCRIPT],
                env={"TMPDIR": str(tmp_path), "PYTHON_EXEC": str(fake), "GLOO_SOCKET_IFNAME": "nosuchif0"}, timeout=120)
    assert r.returncode == 2, r
    assert f"FAIL store 127.0.0.1:{port}: cannot listen here: Address already in use" in r.stdout, r
    assert "FAIL python: " in r.stdout and "No module named 'torch'" in r.stdout, r
    assert "FAIL GLOO_SOCKET_IFNAME=nosuchif0: names no interface that is up" in r.stdout, r
    assert r.stdout.count("fix: ") >= 3
    assert "rankrun --check: 3 of" in r.stdout


@torch_only
def test_check_names_the_workers_torch_and_whether_it_has_libuv(tmp_path):
    """The python line names the torch the workers import; a 2.x built without libuv (Debian's 2.6 and 2.14)
    is said, with what it means: 1.13 has no libuv question."""
    version = subprocess.run([PYTHON, "-c", "import torch; print(torch.__version__)"], capture_output=True,
                             text=True, timeout=60).stdout.strip()
    r = run(["--check", SCRIPT], env={"TMPDIR": str(tmp_path)}, timeout=120)
    line = next(l for l in r.stdout.splitlines() if l.startswith("ok   python: "))
    assert f"imports torch {version}" in line, r
    major, minor = (int(x) for x in re.match(r"(\d+)\.(\d+)", version).groups())
    if (major, minor) < (2, 4):
        assert "libuv" not in line, line
    elif "+debian" in version:
        assert "built without libuv: rankrun makes its workers' store client without it" in line, line
