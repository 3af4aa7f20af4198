"""`rankrun --check`: one line per check, the fix for each failure, exit 0 or 2, nothing started."""
import os
import socket
import stat

from harness import SCRIPTS, run

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
