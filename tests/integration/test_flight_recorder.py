"""torch's flight recorder in rankrun's Python workers (torch 2.x; gloo on CPU).

rankrun turns the recorder on (RANKRUN_FLIGHT_RECORDER entries, unless the user set
TORCH_FR_BUFFER_SIZE), its sampler reads each process group's last collective enqueued, started
and completed once a second, and on a hang every live rank's dump is kept under the log dir
(attempt_N/<local rank>/flight_recorder.json) and matched across ranks by rankrun: the verdict
names the sequence id where the ranks part and the rank to look at first.

Under a torch without the generic recorder (1.13, 2.6) these tests are skipped; make test runs
those marked torch_commit with sid's torch 2.14, make test-torch all of them.
"""
import json
import re

import pytest

from harness import PYTHON, SCRIPTS, has_flight_recorder, run, torch_only, torch_version

HUNG = 124
SCRIPT = SCRIPTS / "collective_hangs.py"
TWO = ["--nproc-per-node", "2"]


flight_recorder = pytest.mark.skipif(not has_flight_recorder(),
                                     reason=f"the torch of {PYTHON} has no generic flight recorder (torch 2.8 or later)")


def blocking_line(case, rank):
    for number, line in enumerate(SCRIPT.read_text().splitlines(), 1):
        m = re.search(r"# the blocking line: (\S+) rank (\d+)", line)
        if m and m.group(1) == case and int(m.group(2)) == rank:
            return number
    raise AssertionError(f"no blocking line for {case} rank {rank}")


def verdict(r):
    lines = [l for l in r.stderr.splitlines() if l.startswith("rankrun: verdict: ")]
    assert len(lines) == 1, r
    return lines[0]


def rank_line(r, rank):
    m = re.search(rf"^  rank {rank}: .*$", r.stderr, re.M)
    assert m, r
    return m.group(0)


def kept_dump(logs, local_rank):
    found = list(logs.glob(f"*/attempt_0/{local_rank}/flight_recorder.json"))
    assert len(found) == 1, list(logs.rglob("*"))
    return json.loads(found[0].read_text())


@torch_only
@flight_recorder
@pytest.mark.torch_commit
def test_different_collectives_at_one_sequence_id(tmp_path):
    logs = tmp_path / "logs"
    r = run([*TWO, "--progress-timeout", "6", "--log-dir", logs, SCRIPT, "op_mismatch"], timeout=90)
    assert r.returncode == HUNG, r
    assert "flight recorder: all_gather #4 not completed" in rank_line(r, 0), r
    assert "flight recorder: broadcast #4 not completed" in rank_line(r, 1), r
    v = verdict(r)
    assert "Flight recorder: at collective #4 of the default group the ranks run different collectives: " \
           "rank 0 all_gather ([[4]] Float), rank 1 broadcast ([[4]] Float)." in v, v
    # every rank's dump is kept, as torch wrote it
    for local_rank in (0, 1):
        dump = kept_dump(logs, local_rank)
        assert dump["pg_status"]["0"]["last_enqueued_collective"] == "4", dump["pg_status"]
        assert [e["profiling_name"] for e in dump["entries"]][-1] == ("gloo:all_gather" if local_rank == 0 else "gloo:broadcast")


@torch_only
@flight_recorder
def test_a_rank_that_skips_one_all_reduce_of_a_thousand():
    r = run([*TWO, "--progress-timeout", "6", SCRIPT, "skip_one"], timeout=120)
    assert r.returncode == HUNG, r
    v = verdict(r)
    assert "Flight recorder: at collective #1000 of the default group" in v, v
    assert "rank 0 all_reduce ([[16]] Float), rank 1 barrier (no tensors)" in v, v
    assert "Look at rank 1 first" in v, v


@torch_only
@flight_recorder
@pytest.mark.torch_commit
def test_a_rank_outside_the_collectives_never_enqueued_what_the_others_wait_in():
    r = run([*TWO, "--progress-timeout", "6", "--straggler-timeout", "8", SCRIPT, "stays_out"], timeout=90)
    assert r.returncode == HUNG, r
    v = verdict(r)
    assert (f"Flight recorder: rank 0 is in all_reduce #3 of the default group; rank 1 never enqueued it, its last was "
            f"broadcast #2 (now at collective_hangs.py:{blocking_line('stays_out', 1)} in stays_out). Look at rank 1 first.") in v, v
    assert "flight recorder: last completed #2" in rank_line(r, 1), r


@torch_only
@flight_recorder
@pytest.mark.parametrize("pace", [pytest.param(None, id="default-pace"),
                                  pytest.param("60", id="sampler-woken", marks=pytest.mark.torch_commit)])
def test_a_rank_that_dies_of_a_collective_timeout_leaves_the_others_dumps(pace, tmp_path):
    # rank 0's all_reduce times out (3 s) while rank 1 sleeps: before rank 0's failure stops rank
    # 1, rank 1's dump is collected and matched with the one rank 0 left as it died. At a pace of
    # 60 s, rank 1's sampler answers only because the ask wakes it.
    logs = tmp_path / "logs"
    env = {"RANKRUN_SAMPLE_INTERVAL": pace} if pace else {}
    r = run([*TWO, "--log-dir", logs, SCRIPT, "collective_timeout"], env=env, timeout=90)
    assert r.returncode == 1, r
    assert re.search(r"^rankrun: warning: rank 0 died of a collective timeout \(.*Timed out waiting 3000ms", r.stderr, re.M), r
    # rank 0's own dump is written as the timeout's exception reaches Python, while gloo's thread
    # may not yet have marked the collective completed (with its error) in the recorder: "is in"
    # then, "reached" after; both are what that dump says
    assert re.search(r"^rankrun: rank 0's collective timeout: Flight recorder: rank 0 (reached|is in) all_reduce #2 of "
                     r"the default group; rank 1 never enqueued it, its last was all_reduce #1 \(now at "
                     rf"collective_hangs\.py:{blocking_line('collective_timeout', 1)} in collective_timeout\)\. "
                     r"Look at rank 1 first\.$", r.stderr, re.M), r
    assert re.search(r"^stack of rank 1 \(pid \d+\):", "\n".join(r.err_lines(1)), re.M), r
    for local_rank in (0, 1):
        assert kept_dump(logs, local_rank)["pg_status"]["0"]["last_enqueued_collective"] == str(2 - local_rank)
    # rank 0's failure is the root cause, as it was
    assert re.search(r"^Root cause: rank 0 ", r.stderr, re.M), r


@torch_only
@flight_recorder
def test_a_busy_job_of_thousands_of_small_collectives_is_never_stopped():
    r = run([*TWO, "--progress-timeout", "4", SCRIPT, "busy_small", "12"], timeout=90)
    assert r.returncode == 0, r
    assert all(re.fullmatch(r"done \d+", l) for l in r.lines(0) + r.lines(1)) and len(r.lines(0)) == 1, r
    assert int(r.lines(0)[0].split()[1]) > 2000, r
    assert "HANG" not in r.stderr and "straggler" not in r.stderr, r


@torch_only
@flight_recorder
@pytest.mark.torch_commit
@pytest.mark.parametrize("off", [{"RANKRUN_FLIGHT_RECORDER": "0"}, {"TORCH_FR_BUFFER_SIZE": "0"}])
def test_the_recorder_can_be_turned_off(off, tmp_path):
    # RANKRUN_FLIGHT_RECORDER=0: rankrun neither sets nor reads it; the user's TORCH_FR_BUFFER_SIZE=0
    # wins over rankrun's default, and torch then keeps nothing to read
    logs = tmp_path / "logs"
    r = run([*TWO, "--progress-timeout", "6", "--log-dir", logs, SCRIPT, "op_mismatch"], env=off, timeout=90)
    assert r.returncode == HUNG, r
    assert "flight recorder: " not in rank_line(r, 0), r
    assert "Flight recorder:" not in verdict(r), r
    if "RANKRUN_FLIGHT_RECORDER" in off:
        assert not list(logs.rglob("flight_recorder*.json")), list(logs.rglob("*"))


@torch_only
@pytest.mark.torch_commit
def test_the_old_async_error_handling_name_only_for_a_torch_that_reads_it(tmp_path):
    script = tmp_path / "env.py"
    script.write_text("import os, torch.distributed\n"
                      "print('old=' + os.environ.get('NCCL_ASYNC_ERROR_HANDLING', '-'))\n"
                      "print('new=' + os.environ.get('TORCH_NCCL_ASYNC_ERROR_HANDLING', '-'))\n"
                      "print('fr=' + os.environ.get('TORCH_FR_BUFFER_SIZE', '-') + ',' + "
                      "os.environ.get('TORCH_NCCL_TRACE_BUFFER_SIZE', '-'))\n")
    r = run(["--nproc-per-node", "1", script], timeout=60)
    assert r.returncode == 0, r
    old_torch = torch_version() < (2, 2)
    assert r.lines(0)[0] == ("old=1" if old_torch else "old=-"), r
    assert r.lines(0)[1] == "new=1", r
    if has_flight_recorder():
        assert r.lines(0)[2] == "fr=2000,-", r
    elif torch_version() < (2, 0):
        assert r.lines(0)[2] == "fr=-,-", r
    # the user's own setting wins
    r = run(["--nproc-per-node", "1", script], env={"NCCL_ASYNC_ERROR_HANDLING": "0", "TORCH_FR_BUFFER_SIZE": "7"}, timeout=60)
    assert r.lines(0)[0] == "old=0" and r.lines(0)[2].startswith("fr=7,"), r
