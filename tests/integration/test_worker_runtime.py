"""The worker runtime as trainers use it: real rank processes against a real store.

Two ways to start ranks: by hand against the standalone `rankrun-store` (environment set by
the test, as a launcher would), and under the real `rankrun` launcher, which hosts the store
itself. Build dir: $RANKRUN_BUILD_DIR (default build/ of this tree, see harness.py).
Run: RANKRUN_BUILD_DIR=build /usr/bin/python3 -m pytest -q tests/integration/test_worker_runtime.py
"""
import json
import os
import re
import shutil
import signal
import subprocess
import time

import pytest

from harness import BUILD

STORE = BUILD / "rendezvous" / "rankrun-store"
RANKRUN = BUILD / "launcher" / "rankrun"
ALLREDUCE = BUILD / "examples" / "cpp_store_allreduce" / "cpp_store_allreduce"
C_API = BUILD / "examples" / "c_api_allgather" / "c_api_allgather"
UNEVEN = BUILD / "examples" / "uneven_join" / "uneven_join"
NCCL = BUILD / "examples" / "nccl_allreduce" / "nccl_allreduce"

# Variables a launcher sets; cleared so that the test's own environment cannot leak in.
LAUNCHER_VARS = ["RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                 "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_ERROR_FILE", "CUDA_VISIBLE_DEVICES"]


def need(path):
    if not path.exists():
        pytest.skip(f"{path} is not built")


def base_env(extra=None):
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS}
    env.update(extra or {})
    return env


class Store:
    def __init__(self):
        need(STORE)
        self.proc = subprocess.Popen([str(STORE), "--host", "127.0.0.1", "--port", "0"], stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        line = self.proc.stdout.readline()
        m = re.search(r"listening on ([\d.]+):(\d+)", line)
        assert m, f"rankrun-store said {line!r}"
        self.host, self.port = m.group(1), int(m.group(2))

    def close(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def store():
    s = Store()
    yield s
    s.close()


class Ranks:
    """One process per rank with the environment rankrun would give it."""

    def __init__(self, binary, args, world, store, tmp_path, per_rank_env=None):
        need(binary)
        self.procs = []
        self.error_files = []
        for rank in range(world):
            error_file = tmp_path / f"attempt_0/{rank}/error.json"
            self.error_files.append(error_file)
            env = base_env({"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world),
                            "LOCAL_WORLD_SIZE": str(world), "TORCHELASTIC_RESTART_COUNT": "0",
                            "TORCHELASTIC_ERROR_FILE": str(error_file)})
            if store is not None:
                env.update({"MASTER_ADDR": store.host, "MASTER_PORT": str(store.port)})
            env.update((per_rank_env or {}).get(rank, {}))
            self.procs.append(subprocess.Popen([str(binary), *map(str, args)], stdout=subprocess.PIPE,
                                               stderr=subprocess.PIPE, text=True, env=env))
        self.results = {}

    def wait(self, ranks=None, timeout=60):
        """{rank: (returncode, stdout, stderr)} for `ranks` (default all)."""
        deadline = time.monotonic() + timeout
        for rank in ranks if ranks is not None else range(len(self.procs)):
            proc = self.procs[rank]
            try:
                out, err = proc.communicate(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.kill()
                pytest.fail(f"rank {rank} did not finish in {timeout}s")
            self.results[rank] = (proc.returncode, out, err)
        return self.results

    def kill(self):
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()

    def error_record(self, rank):
        return json.loads(self.error_files[rank].read_text())


@pytest.fixture
def ranks_started():
    started = []

    def start(*args, **kwargs):
        r = Ranks(*args, **kwargs)
        started.append(r)
        return r

    yield start
    for r in started:
        r.kill()


# --- against the standalone store -----------------------------------------------------------

@pytest.mark.parametrize("world", [2, 3, 4])
def test_store_allreduce_gives_the_right_sum(store, ranks_started, tmp_path, world):
    ranks = ranks_started(ALLREDUCE, ["--size", "1000"], world, store, tmp_path)
    for rank, (rc, out, err) in ranks.wait().items():
        assert rc == 0, err
        assert f"rank {rank}/{world}: sum of 1000 elements" in out
        assert out.rstrip().endswith("ok"), out


def test_world_of_one_needs_no_launcher_and_no_store(ranks_started, tmp_path):
    need(ALLREDUCE)
    proc = subprocess.run([str(ALLREDUCE), "--size", "5"], capture_output=True, text=True, timeout=30, env=base_env())
    assert proc.returncode == 0, proc.stderr
    assert "rank 0/1: sum of 5 elements [1 ... 5] ok" in proc.stdout


def test_c_api_all_gather_broadcast_barrier(store, ranks_started, tmp_path):
    ranks = ranks_started(C_API, [], 3, store, tmp_path)
    for rank, (rc, out, err) in ranks.wait().items():
        assert rc == 0, err
        assert f"rank {rank}/3: ok" in out


def test_join_makes_uneven_ranks_stop_together(store, ranks_started, tmp_path):
    ranks = ranks_started(UNEVEN, [5], 4, store, tmp_path)
    for rank, (rc, out, err) in ranks.wait().items():
        assert rc == 0, out + err
        assert f"rank {rank}/4: {5 + rank} batches, stop-at-first steps=5, use-all steps=8 ok" in out


def test_rank_missing_from_barrier_is_named(store, ranks_started, tmp_path):
    ranks = ranks_started(ALLREDUCE, ["--hang-rank", 2, "--timeout-ms", 2000], 4, store, tmp_path)
    started = time.monotonic()
    results = ranks.wait([0, 1, 3], timeout=30)
    assert time.monotonic() - started < 20
    assert ranks.procs[2].poll() is None, "the hanging rank should still be waiting"
    for rank, (rc, out, err) in results.items():
        assert rc == 1, out + err
        assert "barrier 'start' (#1) timed out after 2s: rank 2 of 4 did not arrive" in err
        record = ranks.error_record(rank)
        assert record["message"]["message"] == (
            "rankrun::CollectiveTimeout: barrier 'start' (#1) timed out after 2s: rank 2 of 4 did not arrive")


def test_diverging_collectives_are_named_on_every_rank(store, ranks_started, tmp_path):
    ranks = ranks_started(ALLREDUCE, ["--mismatch-rank", 1, "--timeout-ms", 10000], 3, store, tmp_path)
    for rank, (rc, out, err) in ranks.wait(timeout=30).items():
        assert rc == 1, out + err
        assert "rankrun::CollectiveMismatch: collective #1 does not match across ranks: " \
               "ranks 0,2 called barrier 'start'; rank 1 called barrier 'not-start'" in err


def test_heartbeat_and_collective_records_in_the_store(store, ranks_started, tmp_path):
    ranks = ranks_started(ALLREDUCE, ["--size", "3", "--print-progress"], 2, store, tmp_path)
    results = ranks.wait()
    rc, out, err = results[0]
    assert rc == 0, err
    now_ms = time.time() * 1000
    for rank in range(2):
        hb = re.search(rf"^rankrun/hb/{rank} = (\d+) (-?\d+)$", out, re.M)
        assert hb, out
        assert abs(int(hb.group(1)) - now_ms) < 60_000
        assert re.search(rf"^rankrun/coll/{rank} = barrier #4 (enter|exit) end$", out, re.M), out


def test_uncaught_exception_writes_the_error_file(tmp_path):
    need(ALLREDUCE)
    error_file = tmp_path / "deep" / "dir" / "error.json"
    before = int(time.time())
    proc = subprocess.run([str(ALLREDUCE), "--throw-on-rank", "0"], capture_output=True, text=True, timeout=30,
                          env=base_env({"TORCHELASTIC_ERROR_FILE": str(error_file)}))
    assert proc.returncode == 1
    record = json.loads(error_file.read_text())
    message = record["message"]
    assert message["message"] == "std::runtime_error: rank 0 failed on purpose (--throw-on-rank)"
    callstack = message["extraInfo"]["py_callstack"]
    # Thrown, not caught: the stack still shows the function that threw, innermost first.
    assert callstack.startswith("#0 ") and "example::fail_on_purpose(int)" in callstack.splitlines()[0], callstack
    assert before <= int(message["extraInfo"]["timestamp"]) <= int(time.time()) + 1
    assert "std::runtime_error: rank 0 failed on purpose" in proc.stderr
    assert not list(error_file.parent.glob("*.tmp.*")), "temporary file left behind"


def test_bad_environment_is_named_and_recorded(tmp_path):
    need(ALLREDUCE)
    error_file = tmp_path / "error.json"
    env = base_env({"RANK": "5", "LOCAL_RANK": "0", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "x",
                    "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1", "TORCHELASTIC_ERROR_FILE": str(error_file)})
    proc = subprocess.run([str(ALLREDUCE)], capture_output=True, text=True, timeout=30, env=env)
    assert proc.returncode == 1
    assert "RANK=5 must be less than WORLD_SIZE=4" in proc.stderr
    assert "LOCAL_WORLD_SIZE='x' is not a non-negative integer" in proc.stderr
    assert json.loads(error_file.read_text())["message"]["message"].startswith("rankrun::EnvError: ")


def have_gpu():
    smi = shutil.which("nvidia-smi")
    return bool(smi) and subprocess.run([smi, "-L"], capture_output=True).returncode == 0


def test_nccl_example_runs_or_fails_cleanly(tmp_path):
    need(NCCL)
    error_file = tmp_path / "error.json"
    proc = subprocess.run([str(NCCL), "1024"], capture_output=True, text=True, timeout=120,
                          env=base_env({"TORCHELASTIC_ERROR_FILE": str(error_file)}))
    if have_gpu():
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "0 wrong" in proc.stdout
    else:
        # No driver: the device is set first, so that is what fails, with CUDA's reason.
        assert proc.returncode == 1, proc.stdout + proc.stderr
        message = json.loads(error_file.read_text())["message"]["message"]
        assert message.startswith("rankrun::NcclError: cudaSetDevice(0) failed on rank 0: "), message


# --- under the launcher ----------------------------------------------------------------------

def launch(args, timeout=60):
    need(RANKRUN)
    proc = subprocess.run([str(RANKRUN), "--nproc-per-node", "4", "--no-python", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, env=base_env())
    return proc


def test_launcher_four_ranks_store_allreduce():
    need(ALLREDUCE)
    proc = launch([ALLREDUCE, "--size", "100"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for rank in range(4):
        assert f"rank {rank}/4: sum of 100 elements [10 ... 406] ok" in proc.stdout


def test_launcher_four_ranks_uneven_join():
    need(UNEVEN)
    proc = launch([UNEVEN, 3])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("stop-at-first steps=3, use-all steps=6 ok") == 4


def launcher_report(stderr):
    """rankrun's own closing summary: the lines between its last two borders (workers' lines
    carry a "[rank] " prefix and cannot be among them)."""
    lines = stderr.splitlines()
    borders = [i for i, line in enumerate(lines) if line == "=" * 72]
    assert len(borders) >= 2, stderr
    report = lines[borders[-2] + 1:borders[-1]]
    assert not any(re.match(r"\[\d+\] ", line) for line in report), stderr
    return report


def test_launcher_report_shows_the_exception_and_its_backtrace():
    need(ALLREDUCE)
    proc = launch([ALLREDUCE, "--throw-on-rank", 2, "--timeout-ms", 5000])
    assert proc.returncode == 1, proc.stdout + proc.stderr
    report = launcher_report(proc.stderr)
    text = "\n".join(report)
    assert report[0].startswith(f"rankrun: {ALLREDUCE} FAILED ("), text
    # The table: the root cause first, the others stopped by rankrun.
    assert report[1].split() == ["rank", "local", "pid", "result", "time"], text
    root = re.fullmatch(r"  2\s+2\s+(\d+)\s+exit 1  <- root cause\s+[\d.]+s", report[2])
    assert root, text
    pid = root.group(1)
    for rank in (0, 1, 3):
        assert any(re.fullmatch(rf"  {rank}\s+{rank}\s+\d+\s+terminated by rankrun \((SIG[A-Z]+|exited \d+)\)\s+[\d.]+s",
                                line) for line in report), text
    # The root-cause section: rank, exit code, and the record from the rank's error file.
    cause = next(i for i, line in enumerate(report) if line.startswith("Root cause: "))
    assert re.fullmatch(rf"Root cause: rank 2 \(local_rank 2, pid {pid}\) exited with code 1 after [\d.]+s",
                        report[cause]), text
    assert report[cause + 1] == "  error: std::runtime_error: rank 2 failed on purpose (--throw-on-rank)", text
    m = re.fullmatch(r"  traceback \(from (.+)\):", report[cause + 2])
    assert m and m.group(1).endswith("/attempt_0/2/error.json"), text
    # The backtrace the rank recorded, innermost first: the function that threw.
    assert report[cause + 3].startswith("    #0 ") and "example::fail_on_purpose(int)" in report[cause + 3], text
    assert report[-1] == "rankrun: exit code 1 (rank 2's)", text


def test_launcher_names_the_rank_that_never_reached_the_barrier():
    need(ALLREDUCE)
    proc = launch([ALLREDUCE, "--hang-rank", 2, "--timeout-ms", 3000], timeout=60)
    output = proc.stdout + proc.stderr
    # A rank that timed out is the root cause (exit 1, its code); the report names the missing
    # rank from that rank's error file, and rankrun stopped rank 2, which would have waited on.
    assert proc.returncode == 1, output
    summary = proc.stderr[proc.stderr.rindex("=" * 72, 0, proc.stderr.rindex("=" * 72)):]
    assert re.search(r"^Root cause: rank [013] \(local_rank [013], pid \d+\) exited with code 1", summary, re.M), summary
    assert ("  error: rankrun::CollectiveTimeout: barrier 'start' (#1) timed out after 3s: "
            "rank 2 of 4 did not arrive") in summary, summary
    assert re.search(r"^  2 +2 +\d+ +terminated by rankrun \(SIGTERM\)", summary, re.M), summary
