"""The field reports' hangs (scripts/seed_hangs.py, gloo on CPU) under the hang policy.

Each Python worker has an in-worker sampler: rankrun knows where each rank's main thread is,
whether it is inside a torch.distributed collective (all_reduce, barrier, init_process_group, ...)
or in DDP's backward ("backward"), and for how long it has been blocked there.

- --progress-timeout: every live rank blocked in a collective (the same or different ones; ranks
  that exited do not count) for that long is a hang: exit 124, every live rank's stack
  ("stack of rank N (pid P):" and faulthandler frames), a line per rank ("  rank N: ...") and one
  "rankrun: verdict: ..." that names who is where.
- --straggler-timeout: ranks blocked in collectives while another live rank is outside any
  collective (working, or blocked in I/O or a sleep) is a straggler, named with where it is
  ("rankrun: warning: straggler: rank 0 ... seed_hangs.py:L in func") for as long as it lasts; a
  hang only after --straggler-timeout.
- A busy job (all_reduce in a loop, silent) is never a hang.

What the cases do under gloo (torch 1.13; 2.6 and 2.14 block at the same lines), which is not
what the reports saw under NCCL:
- ddp1 and ddp6 finish. ddp2, ddp3 and ddp5 hang: rank 1 in backward() of its extra input,
  rank 0 in a barrier() (the script's final one for ddp2/ddp3, case 5's own for ddp5: under gloo a
  barrier never matches an all_reduce, so rank 0 does not finish as it did under NCCL). ddp4
  hangs with rank 0 in join()'s all_reduce and rank 1 in its barrier() (under NCCL rank 1
  finished).
- A rank that exits closes its gloo sockets: a peer waiting on it fails within ~50 ms with
  "Connection closed by peer". straggler_exits is an error, not a hang.
- own_master_port: torch 1.13's store client gives up on the first EINTR, so a signal sent to
  the worker while it connects ends it with "Interrupted system call" (2.x retries).
"""
import re
import time

import pytest

from harness import SCRIPTS, has_flight_recorder, run, torch_only

# make test runs the cases marked torch_commit again with torch 2.14, one of each kind (DDP's
# backward, an epoch's end, a busy silent job, a checkpoint, a store connect); make test-torch
# runs them all.

HUNG = 124
SCRIPT = SCRIPTS / "seed_hangs.py"
TWO = ["--nproc-per-node", "2"]


def blocking_line(case, rank):
    """The number of the line marked `# the blocking line: <case> rank <rank>` (or `<case> every rank`)."""
    for number, line in enumerate(SCRIPT.read_text().splitlines(), 1):
        marker = re.search(r"# the blocking line: (.*)$", line)
        if not marker:
            continue
        for item in marker.group(1).split(";"):
            m = re.match(r"\s*(\S+) (?:rank (\d+)|every rank)\b", item)
            if m and m.group(1) == case and (m.group(2) is None or int(m.group(2)) == rank):
                return number
    raise AssertionError(f"no blocking line for {case} rank {rank}")


def stack_of(r, rank):
    return "\n".join(r.err_lines(rank))


def assert_blocked_at(r, case, rank, func):
    """Rank `rank`'s stack was dumped, and it shows the rank at its blocking line, in `func`."""
    stack = stack_of(r, rank)
    assert re.search(rf"^stack of rank {rank} \(pid \d+\):", stack, re.M), r
    assert f'seed_hangs.py", line {blocking_line(case, rank)} in {func}' in stack, r


def rank_line(r, rank):
    m = re.search(rf"^  rank {rank}: .*$", r.stderr, re.M)
    assert m, r
    return m.group(0)


def verdict(r):
    lines = [l for l in r.stderr.splitlines() if l.startswith("rankrun: verdict: ")]
    assert len(lines) == 1, r
    return lines[0]


def names(text, rank, where):
    """`text` says that rank `rank` is in (or at) `where`, with no other rank named in between."""
    return re.search(rf"\brank {rank}\b(?:(?!\branks? \d).){{0,80}}?\b{where}\b", text) is not None


def assert_hang(r, where):
    """A hang: 124, the HANG line, each rank's line saying where it waits, and the verdict naming
    who is where (where every rank waits in the same place, that place is enough)."""
    assert r.returncode == HUNG, r
    assert re.search(r"^rankrun: HANG: ", r.stderr, re.M), r
    v = verdict(r)
    for rank, place in where.items():
        assert re.search(rf"\b{place}\b", rank_line(r, rank)), r
        if len(set(where.values())) == 1:
            assert re.search(rf"\b{place}\b", v), v
        else:
            assert names(v, rank, place), v


def assert_flight_recorder_names_rank_1(r):
    """With torch's flight recorder (torch 2.8 and later), the verdict also says at which
    collective of the default group the ranks part, and that rank 1 (the one with the extra
    input) is the one to look at."""
    if not has_flight_recorder():
        return
    v = verdict(r)
    assert re.search(r"Flight recorder: at collective #\d+ of the default group the ranks run different", v), v
    assert "Look at rank 1 first" in v, v


def straggler_warnings(r, rank):
    return re.findall(rf"^rankrun: warning: straggler: rank {rank}\b.*$", r.stderr, re.M)


# --- healthy jobs are never killed --------------------------------------------------------------

@torch_only
@pytest.mark.parametrize("case", ["ddp1", "ddp6"])
def test_uneven_inputs_under_join_finish(case):
    # The job takes 2 s; 10 s without progress leaves room for 2 cores shared with other tests
    # (with 5, one run in make test was stopped as a hang with both ranks past their inputs).
    r = run([*TWO, "--progress-timeout", "10", SCRIPT, case], timeout=60)
    assert r.returncode == 0, r
    assert r.lines(0) == ["Rank 0 has exhausted all 5 of its inputs!"], r
    assert r.lines(1) == ["Rank 1 has exhausted all 6 of its inputs!"], r
    assert "HANG" not in r.stderr and "straggler" not in r.stderr, r


@torch_only
@pytest.mark.parametrize("case", ["busy_silent", pytest.param("busy_silent_big", marks=pytest.mark.torch_commit)])
def test_a_busy_silent_job_is_no_hang(case):
    # 12 s of all_reduce in a loop without a line of output, under a 5 s progress timeout
    r = run([*TWO, "--progress-timeout", "5", SCRIPT, case, "12"], timeout=60)
    assert r.returncode == 0, r
    assert r.lines(0) == ["done"] and r.lines(1) == ["done"], r
    assert "HANG" not in r.stderr and "straggler" not in r.stderr, r


@torch_only
@pytest.mark.parametrize("case, func", [
    pytest.param("slow_checkpoint", "write_checkpoint", marks=pytest.mark.torch_commit),
    ("slow_checkpoint_blocked", "write_checkpoint_to_a_dead_nfs_server"),
])
def test_a_slow_checkpoint_is_a_straggler_not_a_hang(case, func):
    # rank 0 is away from the collectives for 12 s (writing, or blocked in I/O) while rank 1 waits
    # in barrier(): a warning that names rank 0 and where it is, then the job finishes
    r = run([*TWO, "--progress-timeout", "5", "--straggler-timeout", "20", SCRIPT, case, "12"], timeout=60)
    assert r.returncode == 0, r
    assert r.lines(0) == ["done"] and r.lines(1) == ["done"], r
    assert "HANG" not in r.stderr, r
    warnings = straggler_warnings(r, 0)
    assert warnings, r
    assert all(re.search(rf"seed_hangs\.py:\d+ in {func}\b", w) for w in warnings), r
    if case == "slow_checkpoint_blocked":
        assert f"seed_hangs.py:{blocking_line(case, 0)} in {func}" in warnings[0], r
    assert not straggler_warnings(r, 1), r


# --- seed 001: DDP with uneven inputs ----------------------------------------------------------

@torch_only
@pytest.mark.parametrize("case, rank0, rank1", [
    # rank 0 ran out of inputs and waits in the script's final barrier(); rank 1's extra input
    # waits in DDP's gradient all_reduce
    ("ddp2", ("the_end_of_training", "barrier"), ("ddp2", "backward")),
    ("ddp3", ("the_end_of_training", "barrier"), ("ddp3", "backward")),
    # join() shadows rank 1's extra input with all_reduces; rank 1's barrier() meets one of them
    ("ddp4", ("ddp4", "all_reduce"), ("ddp4", "barrier")),
    # case 5's own barrier() after the loop, against rank 1's extra backward()
    pytest.param("ddp5", ("ddp5", "barrier"), ("ddp5", "backward"), marks=pytest.mark.torch_commit),
])
def test_uneven_inputs_hang(case, rank0, rank1):
    start = time.monotonic()
    r = run([*TWO, "--progress-timeout", "8", SCRIPT, case], timeout=60)
    assert_hang(r, {0: rank0[1], 1: rank1[1]})
    assert_blocked_at(r, case, 0, rank0[0])
    assert_blocked_at(r, case, 1, rank1[0])
    assert_flight_recorder_names_rank_1(r)
    assert "Rank 1 has exhausted" not in r.stdout, r
    assert time.monotonic() - start < 50, r


# --- seed 002: the end of the first epoch ------------------------------------------------------

@torch_only
@pytest.mark.parametrize("case, collective", [
    pytest.param("epoch_allreduce", "all_reduce", marks=pytest.mark.torch_commit),
    ("epoch_barrier", "barrier"),
])
def test_one_batch_fewer_hangs_at_the_end_of_the_first_epoch(case, collective):
    r = run([*TWO, "--progress-timeout", "8", SCRIPT, case], timeout=60)
    assert_hang(r, {0: collective, 1: "backward"})
    assert_blocked_at(r, case, 0, "uneven_epochs")
    assert_blocked_at(r, case, 1, "train_one_batch")
    assert_flight_recorder_names_rank_1(r)
    assert not any("epoch 1 done" in l for l in r.lines(0) + r.lines(1)), r


@torch_only
@pytest.mark.slow
def test_the_default_progress_timeout_catches_the_end_of_the_first_epoch():
    # no hang flag at all: the default --progress-timeout (180 s) must end it
    start = time.monotonic()
    r = run([*TWO, SCRIPT, "epoch_barrier"], timeout=300)
    took = time.monotonic() - start
    assert_hang(r, {0: "barrier", 1: "backward"})
    assert_blocked_at(r, "epoch_barrier", 0, "uneven_epochs")
    assert_blocked_at(r, "epoch_barrier", 1, "train_one_batch")
    assert 170 < took < 260, f"{took:.0f}s\n{r}"


# --- ranks that never arrive, or leave ---------------------------------------------------------

@torch_only
def test_a_rank_that_never_reaches_init_is_a_straggler_then_a_hang():
    r = run([*TWO, "--progress-timeout", "8", "--straggler-timeout", "20", SCRIPT, "never_init"], timeout=60)
    assert r.returncode == HUNG, r
    warnings = straggler_warnings(r, 1)
    assert warnings and f"seed_hangs.py:{blocking_line('never_init', 1)} in never_init" in warnings[0], r
    assert_blocked_at(r, "never_init", 0, "never_init")
    assert_blocked_at(r, "never_init", 1, "never_init")
    assert re.search(r"\binit_process_group\b", rank_line(r, 0)), r
    v = verdict(r)
    assert re.search(r"\brank 1\b", v) and "init_process_group" in v, v


@torch_only
def test_a_peer_that_exits_is_an_error_under_gloo():
    # rank 1 exits 0 while rank 0 waits in all_reduce: gloo sees the closed socket at once, so
    # rank 0 fails; no hang to report
    r = run([*TWO, "--progress-timeout", "8", SCRIPT, "straggler_exits"], timeout=60)
    assert r.returncode == 1, r
    assert "HANG" not in r.stderr, r
    traceback = "\n".join(r.err_lines(0))
    assert "Connection closed by peer" in traceback, r
    assert f'seed_hangs.py", line {blocking_line("straggler_exits", 0)}, in straggler_exits' in traceback, r
    assert re.search(r"^  1\s+1\s+\d+\s+exit 0\b", r.stderr, re.M), r


@torch_only
def test_ranks_that_exited_do_not_count():
    # rank 1 exited 0 before init_process_group; the one live rank waits there, on rankrun's store
    r = run([*TWO, "--progress-timeout", "8", SCRIPT, "straggler_exits_before_init"], timeout=60)
    assert r.returncode == HUNG, r
    assert re.search(r"^rankrun: HANG: ", r.stderr, re.M), r
    assert_blocked_at(r, "straggler_exits_before_init", 0, "straggler_exits_before_init")
    assert re.search(r"\binit_process_group\b", rank_line(r, 0)), r
    assert re.search(r"\bexited 0\b", rank_line(r, 1)), r
    v = verdict(r)
    assert re.search(r"\brank 0\b", v) and "init_process_group" in v, v
    assert not straggler_warnings(r, 1), r


# --- rendezvous that rankrun cannot see --------------------------------------------------------

NOT_OUR_STORE = r"^rankrun: warning: .*(MASTER_PORT|init_method)"


@torch_only
@pytest.mark.torch_commit
def test_a_store_connect_that_never_succeeds_is_a_hang():
    # the script points MASTER_PORT at a port nobody serves: every rank retries its store connect
    r = run([*TWO, "--progress-timeout", "8", SCRIPT, "own_master_port"], timeout=60)
    assert "Interrupted system call" not in r.stderr, r
    assert_hang(r, {0: "init_process_group", 1: "init_process_group"})
    assert_blocked_at(r, "own_master_port", 0, "own_master_port")
    assert_blocked_at(r, "own_master_port", 1, "own_master_port")
    assert re.search(NOT_OUR_STORE, r.stderr, re.M), r


@torch_only
def test_init_method_tcp_outside_rankrun_store():
    # rank 0 waits in init_process_group(init_method="tcp://..."), rank 1 sleeps before it
    r = run([*TWO, "--progress-timeout", "8", "--straggler-timeout", "20", SCRIPT, "init_method_tcp"], timeout=60)
    assert "Interrupted system call" not in r.stderr, r
    assert r.returncode == HUNG, r
    assert re.search(NOT_OUR_STORE, r.stderr, re.M), r
    warnings = straggler_warnings(r, 1)
    assert warnings and f"seed_hangs.py:{blocking_line('init_method_tcp', 1)} in init_method_tcp" in warnings[0], r
    assert_blocked_at(r, "init_method_tcp", 0, "init_method_tcp")
    assert_blocked_at(r, "init_method_tcp", 1, "init_method_tcp")
    assert re.search(r"\binit_process_group\b", rank_line(r, 0)), r


@torch_only
def test_every_worker_claiming_rank_0():
    # rank=args.local_rank with no --local_rank on argv: both workers say they are rank 0
    r = run([*TWO, "--progress-timeout", "8", SCRIPT, "legacy_local_rank"], timeout=60)
    assert r.returncode != 0, r
    errors = [l for l in r.stderr.splitlines() if re.search(r"error: .*rank 0.*pid \d+.*pid \d+", l)]
    assert errors, r
    assert any("--local_rank" in l or "LOCAL_RANK" in l for l in errors), r
