"""A failure of rankrun's own while the job runs ends through the same door as every other
ending: the workers it started get their grace, the report names what rankrun could not do as
the root cause, and the exit code is the one the README gives it (118), never the usage error's
2. The case of the field: --log-dir on a file system whose inodes run out, 8 workers,
--max-restarts=2, rank 1 exits 3 in the first attempt."""
import os
import re
import shutil
import subprocess

import pytest

from harness import RANKRUN

WORKER = r'''#!/bin/sh
# Attempt 0: rank 1 waits until rankrun has made every rank's directory of attempt 0 (it starts
# the ranks one by one, so rank 1 may run before rank 7's exists), uses up the log file system's
# inodes but 5 (attempt_1 and 4 rank directories), then exits 3. Every rank says which
# attempt's SIGTERM it got (attempt 0's come with the restart), and exits 0.
if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ] && [ "$LOCAL_RANK" = 1 ]; then
  until ls -d "$LOGS"/*/attempt_0/7 >/dev/null 2>&1; do
    sleep 0.01
  done
  mkdir "$LOGS/fill"
  free=$(stat -f -c %d "$LOGS")
  i=0
  while [ $i -lt $((free - 5)) ]; do : > "$LOGS/fill/$i"; i=$((i + 1)); done
  exit 3
fi
trap 'echo "attempt $TORCHELASTIC_RESTART_COUNT rank $RANK got SIGTERM"; exit 0' TERM
sleep 60 &
wait
'''


def test_a_log_dir_out_of_inodes_mid_job_stops_the_workers_with_their_grace_and_exits_118(tmp_path):
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("needs root and unshare to mount a small tmpfs in a private mount namespace")
    logs = tmp_path / "logs"
    logs.mkdir()
    worker = tmp_path / "worker.sh"
    worker.write_text(WORKER)
    worker.chmod(0o755)
    # The tmpfs lives in a mount namespace of its own: it goes when the command ends.
    script = (f"mount -t tmpfs -o size=16M,nr_inodes=400 rrtest-inodes {logs} && "
              f"{RANKRUN} --nproc-per-node=8 --max-restarts=2 --term-timeout=5 --log-dir={logs} --no-python {worker}")
    env = dict(os.environ, LOGS=str(logs))
    env.pop("CUDA_VISIBLE_DEVICES", None)
    r = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script], capture_output=True,
                       text=True, env=env, timeout=120)
    err = r.stderr
    assert r.returncode == 118, (r.returncode, r.stdout, err)
    assert "rank 1 failed (exit 3); restarting all workers (restart 1 of 2)" in err, err
    m = re.search(r"^Root cause: rankrun could not go on: cannot create (\S+)/attempt_1/(\d): No space left on device; "
                  r"check --log-dir$", err, re.M)
    assert m and m.group(1).startswith(str(logs)), err
    failed = int(m.group(2))
    assert failed == 4, err  # attempt_1 and 4 rank directories took the 5 inodes left
    # those it had started: SIGTERM, never SIGKILL (their grace): a rank whose trap was set said so
    # and exited 0, one stopped before its shell got that far died of the SIGTERM itself; the rest
    # never ran
    for rank in range(failed):
        m = re.search(rf"^  {rank} +{rank} +\d+ +terminated by rankrun \((exited 0|SIGTERM)\)", err, re.M)
        assert m, err
        assert (f"attempt 1 rank {rank} got SIGTERM" in r.stdout) == (m.group(1) == "exited 0"), (r.stdout, err)
    assert "SIGKILL" not in err, err
    for rank in range(failed, 8):
        assert re.search(rf"^  {rank} +{rank} +- +not started", err, re.M), err
    assert "rankrun: exit code 118 (rankrun's own failure)" in err, err
    assert "rankrun: error: cannot create" in err and "; stopping the job" in err, err
    # nothing is left running
    left = subprocess.run(["pgrep", "-f", str(worker)], capture_output=True, text=True)
    assert left.stdout.strip() == "", left.stdout
