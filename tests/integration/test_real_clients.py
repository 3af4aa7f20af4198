"""Real clients nobody here wrote: a transformers Trainer and an accelerate script, unmodified
library code, under rankrun with 2 CPU workers (gloo), through a failure and a restart. Tiny
models built from a config and synthetic data: nothing is downloaded. They need an interpreter
whose torch has transformers and accelerate (Debian sid's: tools/torch-tests.sh BUILD sid)."""
import re

import pytest

from harness import PYTHON, SCRIPTS, can_import, run, torch_only

# The tests marked torch_commit run again with torch 2.14 in make test (conftest.py).

def have_hf():
    return can_import("transformers, accelerate")


def hf_only(test):
    # The condition is a string: pytest evaluates it when the test is about to run, so the probe
    # (seconds with a root's interpreter) is paid only where these tests are selected.
    return torch_only(pytest.mark.skipif("not have_hf()", reason=f"transformers and accelerate are not importable "
                                                                 f"by {PYTHON}")(test))


def hf_env(tmp_path, **extra):
    env = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"),
           "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    env.update({k: str(v) for k, v in extra.items()})
    return env


def begins(r, rank):
    """(world_size, process_zero, start_step) of each time rank `rank` began training."""
    return [tuple(int(g) for g in m.groups()) for l in r.lines(rank)
            if (m := re.fullmatch(rf"rank {rank} world_size (\d+) process_zero (\d) start_step (\d+)", l))]


@pytest.mark.torch_commit
@hf_only
def test_transformers_trainer_two_workers(tmp_path):
    out = tmp_path / "out"
    r = run(["--nproc-per-node", "2", SCRIPTS / "hf_trainer.py", out, "4"], env=hf_env(tmp_path), timeout=180)
    assert r.returncode == 0, r
    assert begins(r, 0) == [(2, 1, 0)], r
    assert begins(r, 1) == [(2, 0, 0)], r
    done = [l for l in r.lines(0) if l.startswith("done ")]
    assert len(done) == 1 and re.fullmatch(r"done global_step 4 loss \d+\.\d+", done[0]), r
    assert not any(l.startswith("done ") for l in r.lines(1)), r
    assert (out / "checkpoint-4" / "trainer_state.json").exists()
    assert "restarting" not in r.stderr, r
    assert re.search(r"^rankrun: \S+ finished: all 2 ranks exited 0 \(", r.stderr, re.M), r


@hf_only
def test_transformers_trainer_resumes_after_a_failure(tmp_path):
    out = tmp_path / "out"
    r = run(["--nproc-per-node", "2", "--max-restarts", "1", SCRIPTS / "hf_trainer.py", out, "5"],
            env=hf_env(tmp_path, FAIL_RANK=1, FAIL_STEP=2), timeout=240)
    assert r.returncode == 0, r
    assert "RuntimeError: rank 1 fails on purpose at step 2" in r.stderr, r
    assert "restarting all workers (restart 1 of 1)" in r.stderr, r
    for rank in range(2):
        first, second = begins(r, rank)
        assert first == (2, int(rank == 0), 0), r
        world, zero, start = second
        assert world == 2 and zero == int(rank == 0), r
        # resumed from a checkpoint of attempt 0: checkpoint-1, or checkpoint-2 when rank 0 saved it
        # before rankrun stopped it
        assert start in (1, 2), r
    done = [l for l in r.lines(0) if l.startswith("done ")]
    assert len(done) == 1 and done[0].startswith("done global_step 5 "), r
    assert "after 1 restart" in r.stderr, r


@pytest.mark.torch_commit
@hf_only
def test_accelerate_two_workers(tmp_path):
    r = run(["--nproc-per-node", "2", SCRIPTS / "accel_train.py"], env=hf_env(tmp_path), timeout=180)
    assert r.returncode == 0, r
    for rank in range(2):
        lines = [l for l in r.lines(rank) if l.startswith("process_index")]
        assert len(lines) == 1, r
        assert re.fullmatch(rf"process_index {rank} num_processes 2 gathered \[0, 1\] steps 8 loss \d+\.\d+",
                            lines[0]), r
    assert re.search(r"^rankrun: \S+ finished: all 2 ranks exited 0 \(", r.stderr, re.M), r


@hf_only
def test_accelerate_failing_rank_is_the_root_cause(tmp_path):
    r = run(["--nproc-per-node", "2", SCRIPTS / "accel_train.py"],
            env=hf_env(tmp_path, FAIL_RANK=1, FAIL_STEP=3, FAIL_CODE=13), timeout=180)
    assert r.returncode == 13, r
    assert "Root cause: rank 1 (local_rank 1" in r.stderr, r
    assert re.search(r"^\s+1\s+1\s+\d+\s+exit 13  <- root cause", r.stderr, re.M), r
    assert "rank 1 exits with 13 on purpose after step 3" in r.stderr, r
    assert not any(l.startswith("process_index") for rank in range(2) for l in r.lines(rank)), r
