"""Hangs end with a diagnosis: rankrun detects them, prints each stuck rank's stack with the
blocking line, names the stuck rank and the likely cause, and exits with the hung code (124)."""
import re
import shutil
import time

import pytest

from harness import HELPER, SCRIPTS, have_torch, run, torch_only

# The tests marked torch_commit run again with torch 2.14 in make test (conftest.py).

HUNG = 124
SCRIPT = SCRIPTS / "hang_cases.py"


def blocking_line(marker):
    for number, line in enumerate(SCRIPT.read_text().splitlines(), 1):
        if f"# the blocking line: {marker}" in line:
            return number
    raise AssertionError(marker)


def stack_of(r, rank):
    return "\n".join(l for l in r.err_lines(rank))


@torch_only
def test_uneven_work_rank_0_exits_rank_1_waits():
    start = time.monotonic()
    r = run(["--nproc-per-node", "2", "--exit-timeout", "4", SCRIPT, "uneven"], timeout=90)
    assert r.returncode == HUNG, r
    assert f'hang_cases.py", line {blocking_line("uneven")} in wait_for_the_next_epoch' in stack_of(r, 1), r
    assert "rankrun: HANG: rank 0 exited 0" in r.stderr and "rank 1 still running (--exit-timeout=4s)" in r.stderr, r
    assert re.search(r"^  rank 1: running.* at hang_cases\.py:\d+ in wait_for_the_next_epoch", r.stderr, re.M), r
    assert "verdict: rank 1 is still running while rank 0 exited 0: uneven inputs?" in r.stderr, r
    assert "HUNG and was stopped" in r.stderr and "exit code 124 (hang detected)" in r.stderr
    assert time.monotonic() - start < 60  # bounded, not a timing claim: it must not wait for torch's 30 min


@torch_only
def test_an_asked_sampler_answers_at_once_whatever_its_pace():
    # A sampler that looks once per 60 s is woken by the ask (its <pid>.wake FIFO): the stack is
    # its own (no rankrun frame in it: a signal's dump would show the sampler's thread), within the
    # collector's wait for an answer, long before its next look.
    r = run(["--nproc-per-node", "2", "--exit-timeout", "4", SCRIPT, "uneven"], env={"RANKRUN_SAMPLE_INTERVAL": "60"},
            timeout=90)
    assert r.returncode == HUNG, r
    stack = stack_of(r, 1)
    assert f'hang_cases.py", line {blocking_line("uneven")} in wait_for_the_next_epoch' in stack, r
    assert "_rankrun_watch.py" not in stack and "did not answer" not in stack, r
    assert re.search(r"^  rank 1: running.* at hang_cases\.py:\d+ in wait_for_the_next_epoch", r.stderr, re.M), r


@pytest.mark.torch_commit
@torch_only
def test_mismatched_collectives():
    # no output from any rank for 10 s (torch takes a few seconds to import on a loaded machine)
    r = run(["--nproc-per-node", "2", "--progress-timeout", "10", SCRIPT, "mismatch"], timeout=120)
    assert r.returncode == HUNG, r
    assert f'hang_cases.py", line {blocking_line("mismatch rank 0")} in <module>' in stack_of(r, 0), r
    assert f'hang_cases.py", line {blocking_line("mismatch rank 1")} in <module>' in stack_of(r, 1), r
    assert "ranks are in different collectives (rank 1 in all_reduce, rank 0 in barrier)" in r.stderr, r


@pytest.mark.torch_commit
@torch_only
def test_a_rank_that_never_reaches_init_process_group():
    r = run(["--nproc-per-node", "2", "--init-timeout", "4", SCRIPT, "late"], timeout=90)
    assert r.returncode == HUNG, r
    assert f'hang_cases.py", line {blocking_line("late")} in <module>' in stack_of(r, 1), r
    assert "rank 1 never reached the rendezvous; rank 0 waited there" in r.stderr, r
    assert "verdict: rank 1 never reached init_process_group (it is at hang_cases.py:" in r.stderr, r
    assert re.search(r"^  rank 0: running, in init_process_group", r.stderr, re.M), r


def blocking_line_of(script):
    return next(n for n, line in enumerate(script.read_text().splitlines(), 1) if "# the blocking line" in line)


def stacks_file(log_dir, run_id, local_rank):
    runs = list(log_dir.glob(f"{run_id}_*"))
    assert len(runs) == 1, runs
    return runs[0] / "attempt_0" / str(local_rank) / "stacks.txt"


def test_stacks_go_to_the_log_dir(tmp_path):
    # A Python rank without torch: rankrun's sitecustomize dumps it through faulthandler.
    script = SCRIPTS / "stuck_rank.py"
    logs = tmp_path / "logs"
    r = run(["--nproc-per-node", "2", "--exit-timeout", "2", "--log-dir", logs, "--rdzv-id", "stacks", script],
            env={"STUCK_READY": str(tmp_path / "ready")}, timeout=90)
    assert r.returncode == HUNG, r
    assert "rankrun: HANG: rank 0 exited 0" in r.stderr, r
    saved = stacks_file(logs, "stacks", 1)
    assert saved.is_file(), f"no {saved}\n{r}"
    stacks = saved.read_text()
    assert f'stuck_rank.py", line {blocking_line_of(script)} in wait_for_a_message_that_never_comes' in stacks, stacks
    # the file holds what the console showed for that rank
    assert stacks.splitlines() == stack_of(r, 1).splitlines()[1:], r
    # rank 0 had exited: nothing to dump
    assert not stacks_file(logs, "stacks", 0).exists()


@pytest.mark.skipif(shutil.which("gdb") is None, reason="gdb is not installed")
def test_native_stacks_through_gdb_go_to_the_log_dir(tmp_path):
    # a native worker without the runtime: gdb attaches to it
    r = run(["--nproc-per-node", "2", "--exit-timeout", "2", "--log-dir", tmp_path, "--rdzv-id", "native",
             "--no-python", "sh", "-c", f'[ "$RANK" = 0 ] && exit 0; exec {HELPER} sleep 60'], timeout=90)
    assert r.returncode == HUNG, r
    saved = stacks_file(tmp_path, "native", 1)
    assert saved.is_file(), f"no {saved}\n{r}"
    assert re.search(r"^#\d+ .*\bsleep_seconds\b", saved.read_text(), re.M), \
        saved.read_text()


def test_no_hang_no_report():
    r = run(["--nproc-per-node", "2", "--exit-timeout", "5", "--no-python", "sh", "-c",
             '[ "$RANK" = 0 ] || sleep 1'])
    assert r.returncode == 0, r
    assert "HANG" not in r.stderr


def test_debug_hangs_sets_the_environment():
    r = run(["--debug-hangs", "--no-python", HELPER, "env", "TORCH_DISTRIBUTED_DEBUG", "NCCL_DEBUG", "PYTHONFAULTHANDLER",
             "TORCH_CPP_LOG_LEVEL", "TORCH_SHOW_CPP_STACKTRACES"],
            env={"NCCL_DEBUG": "INFO"})
    # No TORCH_SHOW_CPP_STACKTRACES: its C++ frames would push torch's own error ("Detected
    # mismatch between collectives") out of a failing rank's stderr tail in the report.
    assert r.env_of(0) == {"TORCH_DISTRIBUTED_DEBUG": "DETAIL", "NCCL_DEBUG": "INFO", "PYTHONFAULTHANDLER": "1",
                           "TORCH_CPP_LOG_LEVEL": "INFO", "TORCH_SHOW_CPP_STACKTRACES": "<unset>"}, r


EXAMPLE = None


def example():
    from harness import RANKRUN
    path = RANKRUN.parents[1] / "examples" / "cpp_store_allreduce" / "cpp_store_allreduce"
    if not path.exists():
        pytest.skip("the C++ example is not built")
    return path


def child_with_rank(parent, rank):
    import os
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if ppid == parent and f"RANK={rank}".encode() in env:
            return int(pid)
    raise AssertionError(f"no child of {parent} with RANK={rank}")


def test_native_rank_away_from_the_barrier():
    # rank 1 never calls the barrier; rank 0 waits in it (the runtime's own timeout is far away)
    # rank 1 is outside any collective: a straggler, named while it lasts, then a hang
    r = run(["--nproc-per-node", "2", "--progress-timeout", "3", "--straggler-timeout", "5", "--no-python", example(),
             "--hang-rank", "1", "--timeout-ms", "600000"], timeout=90)
    assert r.returncode == HUNG, r
    assert re.search(r"warning: straggler: rank 1 is outside the collectives \(.*\) while rank 0 waits in barrier #1", r.stderr), r
    assert "rankrun: HANG: rank 0 has been blocked in barrier #1 for" in r.stderr, r
    assert "rank 0: running" in r.stderr and "runtime: barrier #1 (inside) 'start'" in r.stderr, r
    assert "rankrun::Collectives::barrier(" in stack_of(r, 0), r  # the native backtrace from the runtime's handler
    assert "verdict: rank 0 waits in barrier #1 for rank 1 (outside any collective), which never joined them" in r.stderr, r


def test_native_rank_that_stops_heartbeating():
    import signal
    from harness import Running
    job = Running(["--nproc-per-node", "2", "--heartbeat-timeout", "2", "--term-timeout", "1", "--no-python", example(),
                   "--hang-rank", "1", "--timeout-ms", "600000"])
    job.wait_for_lines(r"^\[1\] rank 1: staying away", 1)
    stopped = child_with_rank(job.proc.pid, 1)
    time.sleep(1)  # let it heartbeat first
    os_kill = __import__("os").kill
    os_kill(stopped, signal.SIGSTOP)
    r = job.finish(timeout=60)
    assert r.returncode == HUNG, r
    assert "rankrun: HANG: rank 1 sent no heartbeat for" in r.stderr, r
    assert "verdict: rank 1 stopped heartbeating" in r.stderr, r
    assert re.search(r"^  rank 1: running.*heartbeat \d+s ago", r.stderr, re.M), r


@torch_only
def test_the_injected_sampler_adds_nothing_to_a_rank_s_output():
    # every warning on (DDP's join() turns them on): no ResourceWarning for rankrun's own files,
    # no line of rankrun's in the worker's output, and the sampler did look at the rank
    r = run(["--nproc-per-node", "2", SCRIPTS / "quiet_rank.py"], env={"PYTHONWARNINGS": "always", "PYTHONDEVMODE": "1"},
            timeout=90)
    assert r.returncode == 0, r
    assert r.stdout.count("quiet rank done") == 2, r
    # torch's own lines (gloo's INFO in 2.x) may be there; nothing of rankrun's code may
    worker_err = [l for l in r.stderr.splitlines() if l.startswith("[")]
    ours = [l for l in worker_err if re.search(r"Warning|rankrun|sitecustomize|stacks/\d+", l)]
    assert ours == [], r


@pytest.mark.torch_commit
@torch_only
def test_the_sampler_thread_ends_before_the_interpreter_finalizes():
    r = run(["--nproc-per-node", "2", SCRIPTS / "sampler_at_exit.py"], env={"RANKRUN_SAMPLE_INTERVAL": "0.05"},
            timeout=90)
    assert r.returncode == 0, r
    assert r.stdout.count("sampler started: True") == 2, r
    assert r.stdout.count("sampler at exit: ended") == 2, r
