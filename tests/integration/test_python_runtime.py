"""rankrun's Python runtime (packaging/python/rankrun: rankrun.data, rankrun.progress) in the
workers rankrun starts: the samplers' plans against the C++ runtime's (tests/helpers/plan_printer),
the field reports it answers (seeds 001, 002, 004) with real torch and gloo, and what rankrun sees
of a rank's progress: steps in `rankrun status --json` and the metrics, sections that are not
hangs, a rank that stops beating that is one."""
import hashlib
import json
import os
import random
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness import BUILD, PYTHON, RANKRUN, ROOT, SCRIPTS, Running, run, torch_only

# The tests marked torch_commit run again with torch 2.14 in make test (conftest.py).

JOB = SCRIPTS / "python_runtime_job.py"
EXAMPLE = ROOT / "examples" / "python" / "ddp_train.py"
PLAN_PRINTER = BUILD / "tests" / "helpers" / "plan_printer"
LIBRARY = BUILD / "worker_runtime" / "librankrun_worker.so"
HUNG = 124


def plain_python(code, env=None):
    """`code` in a Python outside rankrun that imports the package as rankrun's workers get it."""
    full = dict(os.environ, PYTHONPATH=str(ROOT / "packaging" / "python"), RANKRUN_WORKER_LIBRARY=str(LIBRARY))
    for key in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK"):
        full.pop(key, None)
    full.update(env or {})
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full, timeout=120)


def cpp_plans(queries):
    out = subprocess.run([str(PLAN_PRINTER)], input="\n".join(queries) + "\n", capture_output=True, text=True,
                         check=True, timeout=120).stdout.splitlines()
    assert len(out) == len(queries)
    return out


def test_the_plans_are_the_cpp_runtimes_over_many_seeds_epochs_and_worlds():
    rng = random.Random(48)
    cases = []
    for _ in range(300):
        world = rng.choice([1, 2, 3, 4, 7, 8, 16])
        cases.append(("d", rng.randrange(0, 200), world, rng.randrange(world), rng.randrange(2),
                      rng.randrange(2 ** 64), rng.randrange(50), rng.randrange(2)))
    for _ in range(150):
        world = rng.choice([1, 2, 3, 4, 8])
        n = rng.randrange(0, 120)
        bounds = sorted(rng.sample(range(1, 60), rng.randrange(0, 4)))
        sizes = [rng.randrange(1, 9) for _ in range(len(bounds) + 1)]
        lengths = [rng.randrange(0, 70) for _ in range(n)]
        cases.append(("b", world, rng.randrange(world), rng.randrange(2), rng.randrange(2 ** 64), rng.randrange(50),
                      rng.randrange(2), lengths, bounds, sizes))

    def as_list(values):
        return ",".join(map(str, values)) or "-"

    queries = [" ".join(map(str, c)) if c[0] == "d" else
               " ".join(map(str, c[:7])) + f" {as_list(c[7])} {as_list(c[8])} {as_list(c[9])}" for c in cases]
    expected = cpp_plans(queries)
    code = f"""
import json, sys
from rankrun.data import DistributedSampler, BucketSampler
out = []
for c in json.loads(sys.stdin.read() if False else {json.dumps(json.dumps(cases))}):
    if c[0] == "d":
        _, n, world, rank, shuffle, seed, epoch, drop = c
        s = DistributedSampler(n, num_replicas=world, rank=rank, shuffle=bool(shuffle), seed=seed, drop_last=bool(drop))
        s.set_epoch(epoch)
        plan = list(s)
        assert len(plan) == len(s), (c, len(plan), len(s))
        out.append(",".join(map(str, plan)))
    else:
        _, world, rank, shuffle, seed, epoch, drop, lengths, bounds, sizes = c
        s = BucketSampler(lengths, bounds, sizes, num_replicas=world, rank=rank, shuffle=bool(shuffle), seed=seed,
                          drop_last=bool(drop))
        s.set_epoch(epoch)
        plan = list(s)
        assert len(plan) == len(s), (c, len(plan), len(s))
        out.append(";".join(",".join(map(str, b)) for b in plan))
print(json.dumps(out))
"""
    r = plain_python(code)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    for case, mine, theirs in zip(cases, got, expected):
        assert mine == theirs, case


def test_the_samplers_shard_as_torchs_and_refuse_bad_arguments_by_name():
    code = """
from rankrun.data import DistributedSampler, BucketSampler
for n in (0, 1, 7, 100, 101):
    for world in (1, 3, 4):
        shards = [list(DistributedSampler(n, num_replicas=world, rank=r, seed=5)) for r in range(world)]
        assert len({len(s) for s in shards}) == 1
        assert set().union(*map(set, shards)) == set(range(n)), (n, world)
        dropped = [set(DistributedSampler(n, num_replicas=world, rank=r, drop_last=True)) for r in range(world)]
        assert sum(map(len, dropped)) == len(set().union(*dropped)) == n // world * world
        # BucketSampler: the same count on every rank, one bucket per step, disjoint with drop_last
        lengths = [(i * 37) % 50 for i in range(n)]
        plans = [list(BucketSampler(lengths, [10, 30], [4, 2, 1], num_replicas=world, rank=r, seed=2))
                 for r in range(world)]
        assert len({len(p) for p in plans}) == 1
        assert set(i for p in plans for b in p for i in b) == set(range(n))
        bucket = lambda b: sum(lengths[b[0]] >= x for x in (10, 30))
        assert all(len({bucket(p[k]) for p in plans}) == 1 for k in range(len(plans[0])))
        plans = [list(BucketSampler(lengths, [10, 30], [4, 2, 1], num_replicas=world, rank=r, drop_last=True))
                 for r in range(world)]
        flat = [i for p in plans for b in p for i in b]
        assert len(flat) == len(set(flat))
s = DistributedSampler(10, num_replicas=2, rank=0)
first = list(s); s.set_epoch(1)
assert list(s) != first and sorted(list(s) + list(DistributedSampler(10, num_replicas=2, rank=1))) != []
for bad, text in [(lambda: DistributedSampler(10, num_replicas=4, rank=4), "rank=4; it must be in [0, 3]"),
                  (lambda: DistributedSampler(10, num_replicas=0, rank=0), "num_replicas=0"),
                  (lambda: BucketSampler([1, 2], [5], [2], num_replicas=1, rank=0), "2 batch sizes" if False else "1 batch sizes for 1 boundaries"),
                  (lambda: BucketSampler([1, 2], [5, 3], [2, 2, 2], num_replicas=1, rank=0), "boundaries"),
                  (lambda: BucketSampler([1, -2], [5], [2, 2], num_replicas=1, rank=0), "lengths: give whole numbers")]:
    try:
        list(bad())
    except ValueError as e:
        assert text in str(e), (text, str(e))
    else:
        raise AssertionError(text)
print("ok")
"""
    r = plain_python(code)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
    # An environment the runtime refuses: one warning, and the samplers work.
    r = plain_python("import rankrun.data, rankrun.progress\n"
                     "print(len(list(rankrun.data.BucketSampler([1, 2, 3], [2], [1, 1]))), rankrun.progress.step())",
                     env={"WORLD_SIZE": "1", "RANK": "0"})
    assert r.returncode == 0 and r.stdout.split() == ["3", "0"], r
    assert r.stderr.count("RuntimeWarning: rankrun.progress: no heartbeat") == 1, r.stderr


def test_every_python_worker_imports_the_rankrun_that_started_it(tmp_path):
    # No torch: the package imports without it, and its plans and progress work over rankrun's store.
    script = tmp_path / "w.py"
    script.write_text("import hashlib, os, rankrun, rankrun.data, rankrun.progress\n"
                      "print('FILE', rankrun.__file__, rankrun.__version__, os.environ['RANKRUN_WORKER_LIBRARY'])\n"
                      "here = os.path.dirname(rankrun.__file__)\n"
                      "print('HASH', ' '.join(f + '=' + hashlib.sha256(open(os.path.join(here, f), 'rb').read())"
                      ".hexdigest() for f in sorted(os.listdir(here)) if f.endswith('.py')))\n"
                      "s = rankrun.data.DistributedSampler(9)\n"
                      "print('SHARD', s.num_replicas, s.rank, sorted(s))\n"
                      "print('EVEN', len(list(rankrun.data.even_batches(range(2 + s.rank)))),\n"
                      "      len(list(rankrun.data.even_batches(range(5 - s.rank), policy='longest'))))\n"
                      "print('STEP', rankrun.progress.step(), rankrun.progress.step(41))\n")
    # A rankrun package elsewhere on the path loses to the launcher's.
    decoy = tmp_path / "decoy" / "rankrun"
    decoy.mkdir(parents=True)
    (decoy / "__init__.py").write_text("raise ImportError('the wrong rankrun')\n")
    r = run(["--nproc-per-node=3", script], env={"TMPDIR": str(tmp_path), "PYTHONPATH": str(tmp_path / "decoy")})
    assert r.returncode == 0, r
    version = re.search(r"RANKRUN_VERSION=\"([^\"]+)\"", (ROOT / "launcher" / "CMakeLists.txt").read_text())
    for rank in range(3):
        lines = {l.split()[0]: l.split(None, 1)[1] for l in r.lines(rank)}
        path, pkg_version, library = lines["FILE"].split()
        assert path.startswith(str(tmp_path)) and path.endswith("/python/rankrun/__init__.py"), path
        assert Path(library).resolve().parent == LIBRARY.resolve().parent, library
        assert re.fullmatch(r"\d+\.\d+\.\d+", pkg_version)
        assert lines["SHARD"].startswith(f"3 {rank} ")
        # the shortest rank's count, then the longest's, agreed over rankrun's store by two wrappers
        assert lines["EVEN"] == "2 5"
        assert lines["STEP"] == "0 41"
        # The package rankrun wrote is packaging/python/rankrun as it is now (a stale build would differ).
        hashes = dict(item.split("=") for item in lines["HASH"].split())
        assert sorted(hashes) == ["__init__.py", "_native.py", "data.py", "progress.py"], hashes
        for name, digest in hashes.items():
            source = (ROOT / "packaging" / "python" / "rankrun" / name).read_bytes().replace(
                b"@RANKRUN_VERSION@", pkg_version.encode())
            assert hashlib.sha256(source).hexdigest() == digest, f"{name} differs from the source: rebuild"
    assert not list(tmp_path.glob("rankrun-*")), "the run directory is left behind"


@pytest.mark.torch_commit
@torch_only
def test_example_ddp_bucketed_equal_batches_disjoint_shards_one_bucket_per_step(tmp_path):
    # Seed 004: a bucketing sampler gave every rank the whole data set. Four ranks, DataLoader
    # worker processes (persistent), two epochs; drop_last so that shards are strictly disjoint.
    record = tmp_path / "record"
    r = run(["--nproc-per-node=4", EXAMPLE, "--epochs", "2", "--workers", "2", "--drop-last", "--samples", "1200",
             "--record", record], env={"TMPDIR": str(tmp_path)}, timeout=240)
    assert r.returncode == 0, r
    ranks = [json.loads(Path(f"{record}.{k}.json").read_text()) for k in range(4)]
    for epoch in range(2):
        reads = [rk["epochs"][epoch] for rk in ranks]
        counts = {len(rd["indices"]) for rd in reads}
        assert counts == {ranks[0]["batches_per_epoch"]} and ranks[0]["batches_per_epoch"] > 0, counts
        assert all(rd["buckets"] == reads[0]["buckets"] for rd in reads), "ranks read different buckets at a step"
        shards = [{i for b in rd["indices"] for i in b} for rd in reads]
        assert sum(map(len, shards)) == len(set().union(*shards)), "two ranks read the same sample"
        assert len(set().union(*shards)) > 1200 * 0.8  # most of the data set, the rest dropped tails
    assert ranks[0]["epochs"][0]["indices"] != ranks[0]["epochs"][1]["indices"], "set_epoch changed nothing"
    assert "epoch 1: " in r.stdout


@torch_only
@pytest.mark.parametrize("scenario, nproc, policy, expect", [
    ("seed002", 4, "shortest", 6), ("seed002", 4, "longest", 12),  # a hand-written interface, 6 + 2r batches
    ("seed001", 3, "shortest", 5),
    pytest.param("seed001", 3, "longest", 7, marks=pytest.mark.torch_commit),  # DDP with uneven inputs, 5 + r of them
])
def test_uneven_data_under_even_batches_ends_0(tmp_path, scenario, nproc, policy, expect):
    r = run([f"--nproc-per-node={nproc}", JOB, scenario, "--even", policy], env={"TMPDIR": str(tmp_path)},
            timeout=120)
    assert r.returncode == 0, r
    for rank in range(nproc):
        assert r.lines(rank) == [f"rank {rank} trained on {expect} batches"], r


def verdict_of(r):
    lines = [l for l in r.stderr.splitlines() if l.startswith("rankrun: verdict:")]
    assert r.returncode == HUNG and lines, r
    return lines[0]


@torch_only
def test_seed_002_without_even_batches_the_report_names_it(tmp_path):
    r = run(["--nproc-per-node=2", "--exit-timeout=3", "--progress-timeout=5", JOB, "seed002"],
            env={"TMPDIR": str(tmp_path)}, timeout=120)
    assert "rankrun.data.even_batches(loader) gives every rank the same number" in verdict_of(r), r


@torch_only
def test_ranks_whose_bucket_plans_differ_get_their_batch_counts_in_the_report(tmp_path):
    # Each rank gave BucketSampler its own lengths: rank 0 plans fewer batches, ends its epoch and
    # waits in the barrier after it while rank 1 is in DDP's all-reduce of its next batch.
    r = run(["--nproc-per-node=2", "--progress-timeout=5", JOB, "own-lengths"], env={"TMPDIR": str(tmp_path)},
            timeout=120)
    verdict = verdict_of(r)
    m = re.search(r"Batches read in epoch 0 \(rankrun\.data\): rank 0 (\d+) of (\d+), rank 1 (\d+) of (\d+)\.$",
                  verdict)
    assert m, verdict
    read0, planned0, read1, planned1 = map(int, m.groups())
    assert read0 == planned0 < planned1 and read1 == read0, verdict


def status_json(tmp):
    out = subprocess.run([str(RANKRUN), "status", "--json"], capture_output=True, text=True,
                         env=dict(os.environ, TMPDIR=str(tmp)), timeout=20)
    return json.loads(out.stdout) if out.returncode == 0 else None


def test_steps_in_status_the_metrics_and_the_events(tmp_path):
    metrics = tmp_path / "metrics.prom"
    events = tmp_path / "events.jsonl"
    job = Running(["--nproc-per-node=2", "--heartbeat-timeout=2", f"--metrics-textfile={metrics}",
                   f"--events={events}", JOB, "steps", "9"], env={"TMPDIR": str(tmp_path)})
    try:
        deadline = time.monotonic() + 60
        seen = None
        while time.monotonic() < deadline:
            seen = status_json(tmp_path)
            if seen and all((rk.get("step") or 0) > 10 and rk.get("steps_per_second") for rk in seen["ranks"]):
                break
            time.sleep(0.5)
        assert seen and all((rk.get("step") or 0) > 10 for rk in seen["ranks"]), seen
        for rk in seen["ranks"]:
            assert 5 < rk["steps_per_second"] < 30, rk  # 20 a second, give or take the machine
        text = subprocess.run([str(RANKRUN), "status"], capture_output=True, text=True,
                              env=dict(os.environ, TMPDIR=str(tmp_path)), timeout=20).stdout
        assert re.search(r"^  steps: rank 0 \d+ \([\d.]+/s\), rank 1 \d+", text, re.M), text
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and "rankrun_rank_step{" not in (metrics.read_text() if metrics.exists() else ""):
            time.sleep(0.5)
        prom = metrics.read_text()
        assert re.search(r'^rankrun_rank_step\{node_rank="0",rank="1"\} \d+$', prom, re.M), prom
        assert re.search(r'^rankrun_rank_steps_per_second\{node_rank="0",rank="0"\} [\d.]+$', prom, re.M), prom
    finally:
        r = job.finish(timeout=60)
    assert r.returncode == 0, r
    progress = [json.loads(l) for l in events.read_text().splitlines() if '"progress"' in l]
    assert {e["rank"] for e in progress} == {0, 1}, progress
    assert all(e["step"] >= 0 for e in progress)


@torch_only
def test_a_section_longer_than_the_progress_timeout_is_not_a_hang(tmp_path):
    # Rank 0 checkpoints for 9 s (declared: 60) while rank 1 waits in a barrier; each limit is 3 s.
    events = tmp_path / "events.jsonl"
    r = run(["--nproc-per-node=2", "--progress-timeout=3", "--straggler-timeout=3", "--heartbeat-timeout=3",
             f"--events={events}", JOB, "section", "9", "60"], env={"TMPDIR": str(tmp_path)}, timeout=120)
    assert r.returncode == 0, r
    assert r.lines(1) == ["after the checkpoint"], r
    warnings = re.findall(r"^rankrun: warning: straggler: (.*)$", r.stderr, re.M)
    assert any(re.search(r"rank 0 is in section 'checkpoint' for \d+s of 60s while rank 1 waits", w)
               for w in warnings), r.stderr
    sections = [json.loads(l) for l in events.read_text().splitlines() if '"section"' in l]
    assert [s["name"] for s in sections if s["rank"] == 0][:2] == ["checkpoint", None], sections


@pytest.mark.torch_commit
@torch_only
def test_a_section_past_its_own_timeout_is_a_hang_that_names_it(tmp_path):
    r = run(["--nproc-per-node=2", "--progress-timeout=60", JOB, "section", "60", "4"],
            env={"TMPDIR": str(tmp_path)}, timeout=120)
    assert r.returncode == HUNG, r
    assert re.search(r"HANG: rank 0 in section 'checkpoint' for \d+s of 4s: past the timeout the section declared",
                     r.stderr), r.stderr


def test_a_rank_that_beats_is_moving(tmp_path):
    # Both ranks sleep in a loop (no CPU, no output); rank 0 calls heartbeat() in it.
    job = Running(["--nproc-per-node=2", "--heartbeat-timeout=2", JOB, "beating", "12"], env={"TMPDIR": str(tmp_path)})
    try:
        deadline = time.monotonic() + 40
        seen = None
        while time.monotonic() < deadline:
            seen = status_json(tmp_path)
            if seen and (seen["ranks"][1].get("still_seconds") or 0) > 6:
                break
            time.sleep(0.5)
        assert seen and seen["ranks"][1]["still_seconds"] > 6, seen
        assert seen["ranks"][0]["still_seconds"] < 3, seen
    finally:
        r = job.finish(timeout=60)
    assert r.returncode == 0, r


def test_a_rank_that_stops_beating_is_hung(tmp_path):
    r = run(["--nproc-per-node=2", "--heartbeat-timeout=3", JOB, "stop-beating"], env={"TMPDIR": str(tmp_path)},
            timeout=120)
    assert r.returncode == HUNG, r
    assert re.search(r"HANG: rank 1 sent no heartbeat for \d+s \(--heartbeat-timeout=3s\)", r.stderr), r.stderr
    assert r.lines(0) == ["done"], r
