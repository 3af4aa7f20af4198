"""rankrun's output when the disk does not keep up: a log file on a full disk is reported once
and the job goes on."""
import os
import subprocess

import pytest

from harness import PYTHON, run


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
