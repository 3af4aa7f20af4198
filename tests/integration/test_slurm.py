"""rankrun under a real Slurm (slurm_rig.py): 3 nodes, each a network namespace with its own slurmd.

Inside a job step (`srun rankrun --nproc-per-node=2 job.py`, no rendezvous flags) rankrun takes
nnodes, node rank, master address (n1's NodeAddr, through `scontrol show node`, since n1..n3 are
not in DNS), master port and run id (`<job>.<step>`) from Slurm. Exit codes under test: 0; the
root cause's code on every node (Slurm's ExitCode); 120 "preempted" on every node after the
preempt signal (SIGUSR1) and then SIGTERM; 2 for set-up errors. The `slurm` fixture fails a test
that leaves any process of a job running on any node; the module's cluster is torn down (and
checked) at the end. One cluster for the module: its tests run one after the other."""
import json
import os
import re
import shlex
import signal
import time
from pathlib import Path

import pytest

from harness import PYTHON, RANKRUN, SCRIPTS, have_torch
from slurm_rig import slurm, slurm_cluster  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.slurm]
torch_only = pytest.mark.skipif(not have_torch(), reason="PyTorch is not importable")

NPROC = 2
NODES = 3
WORLD = NPROC * NODES
PREEMPTED = 120
USAGE = 2
TERM_TIMEOUT = 2  # rankrun's grace; Slurm's KillWait is 5


def rankrun_cmd(script, *extra):
    return " ".join(shlex.quote(str(a)) for a in (RANKRUN, f"--nproc-per-node={NPROC}",
                                                   f"--term-timeout={TERM_TIMEOUT}", *extra, script))


def job_body(rr, srun="srun", record_rc=None):
    """The batch script: srun ... rankrun ...; its exit code is srun's. record_rc=DIR wraps each
    node's rankrun in a shell that survives Slurm's SIGTERM (trap) and writes rankrun's exit code
    to DIR/rc-<node>, for runs that Slurm cancels (srun is then killed before it can report)."""
    if record_rc is not None:
        inner = f'trap : TERM USR1 USR2 CONT; {rr}; rc=$?; d={shlex.quote(str(record_rc))}; echo $rc > $d/tmp-$SLURMD_NODENAME && mv $d/tmp-$SLURMD_NODENAME $d/rc-$SLURMD_NODENAME'
        step = f"{srun} bash -c {shlex.quote(inner)}"
    else:
        step = f"{srun} {rr}"
    return f"""
{step}
rc=$?
echo "batch: srun exited $rc at $(date +%s.%N)"
exit $rc
"""


def wait_files(directory, pattern, count, timeout, job=None, slurm=None):
    deadline = time.monotonic() + timeout
    while True:
        found = sorted(Path(directory).glob(pattern))
        if len(found) >= count:
            return found
        if time.monotonic() > deadline:
            state = slurm.show_job(job) if slurm and job else {}
            pytest.fail(f"only {len(found)} of {count} {pattern} in {timeout}s; job: {state.get('JobState')} "
                        f"{state.get('Reason')}\n{job.output() if job else ''}")
        time.sleep(0.05)


def start_time(pid):
    """(start time) of a live, non-zombie pid, else None: tells a process from a later one that
    reuses its pid."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] == "Z" else fields[19]


def srun_errors(text):
    """{node: code} from srun's `srun: error: n2: task 1: Exited with exit code 3` lines."""
    return {m.group(1): int(m.group(2))
            for m in re.finditer(r"srun: error: (\S+): task \d+: Exited with exit code (\d+)", text)}


def out_dir(tmp_path):
    d = tmp_path / "out"
    d.mkdir(mode=0o777, exist_ok=True)
    return d


# --- 1. a 3-node job configures itself from Slurm --------------------------------------------
@torch_only
def test_three_nodes_from_slurm_env(slurm, tmp_path):
    out = out_dir(tmp_path)
    job = slurm.sbatch(job_body(rankrun_cmd(SCRIPTS / "sl_env.py", "-v")), nodes=NODES, name="env",
                       out_dir=out, env={"SL_OUT": out})
    info = slurm.wait_done(job, timeout=60)
    assert info["JobState"] == "COMPLETED" and info["ExitCode"] == "0:0", f"{info}\n{job.output()}"
    files = wait_files(out, "rank-*.json", WORLD, 5, job, slurm)
    recs = {int(r["RANK"]): r for r in (json.loads(f.read_text()) for f in files)}
    assert sorted(recs) == list(range(WORLD)), job.output()

    master = slurm.addr(1)  # n1 is the first host of the step
    ports = {r["MASTER_PORT"] for r in recs.values()}
    assert len(ports) == 1, ports
    for rank, r in recs.items():
        node = rank // NPROC
        where = f"rank {rank}: {r}"
        assert r["WORLD_SIZE"] == str(WORLD), where
        assert r["LOCAL_RANK"] == str(rank % NPROC), where
        assert r["GROUP_RANK"] == str(node) == r["SLURM_NODEID"], where
        assert r["LOCAL_WORLD_SIZE"] == str(NPROC) and r["GROUP_WORLD_SIZE"] == str(NODES), where
        assert r["SLURMD_NODENAME"] == slurm.nodes[node], where
        assert r["addr"] == slurm.addr(node + 1), where          # it really ran on that node's host
        assert r["netns"] == os.stat(f"/run/netns/{slurm.node_ns[slurm.nodes[node]]}").st_ino, where
        assert r["MASTER_ADDR"] == master, where
        assert r["TORCHELASTIC_RUN_ID"] == f"{job.id}.0", where
        assert r["sum"] == sum(range(WORLD)), where
    # -v: where each value came from
    err = job.err.read_text()
    for needle in ("SLURM_STEP_NUM_NODES", "SLURM_NODEID", "SLURM_STEP_NODELIST"):
        assert err.count(needle) >= NODES, f"-v does not name {needle} on every node:\n{err}"
    # n1 is not in DNS: every node asked Slurm for its NodeAddr
    asked = [l for l in slurm.scontrol_calls() if "show node" in l and " n1" in l]
    assert len(asked) >= NODES, slurm.scontrol_calls()

    running = max(r["t_start"] for r in recs.values()) - job.submitted
    reduced = max(r["t_reduced"] for r in recs.values()) - job.submitted
    print(f"\n[timing] job {job.id}: sbatch -> all {WORLD} workers running {running:.2f}s, "
          f"-> all_reduce done {reduced:.2f}s, -> job ended (seen) {job.ended - job.submitted:.2f}s")


# --- 2. a failing rank ends the job with its code --------------------------------------------
# --- 1b. the nodes prove a job secret that MUNGE handed out, with no flag ------------------------
@torch_only
def test_munge_gives_the_job_a_secret_and_an_outsider_is_refused(slurm, tmp_path):
    """No secret file: the store host (n1) makes the job secret and hands it to each node in a
    MUNGE credential (munged at Slurm's AuthInfo socket, found with `scontrol show config`);
    every node proves it, so none warns about a missing secret. An outsider on the cluster's
    network (the switch namespace, where slurmctld runs) that speaks the store's wire protocol
    by hand is refused at every try, logged once with its address, and the job ends 0."""
    out = out_dir(tmp_path)
    go = out / "go"
    rr = rankrun_cmd(SCRIPTS / "elastic_train.py", "-v") + " 60"
    job = slurm.sbatch(job_body(rr), nodes=NODES, name="munge", out_dir=out,
                       env={"GO_FILE": go, "OMP_NUM_THREADS": "1"})
    deadline = time.monotonic() + 60
    while len(re.findall(r"\bsum=6\b", job.out.read_text() if job.out.exists() else "")) < WORLD:
        if time.monotonic() > deadline:
            go.touch()
            pytest.fail(f"the workers did not all reduce in 60s\n{job.output()}")
        time.sleep(0.1)
    port = re.search(r"MASTER_PORT=(\d+)", job.out.read_text()).group(1)
    attacks = ("forge-stop", "claim-node", "read-nodes", "no-proof", "wrong-proof", "attempt-by-name")
    r = slurm.client(PYTHON, SCRIPTS / "hostile_agent.py", slurm.addr(1), port, *attacks,
                     env={"RUN_ID": f"{job.id}.0"}, timeout=60)
    go.touch()
    info = slurm.wait_done(job, timeout=60)
    assert info["JobState"] == "COMPLETED" and info["ExitCode"] == "0:0", f"{info}\n{job.output()}"
    results = [json.loads(l) for l in r.stdout.splitlines()]
    assert [x["attack"] for x in results] == list(attacks), r
    for x in results:
        assert x["closed"], f"{x}\n{job.output()}"
        assert b'"record":"node"' not in bytes.fromhex(x["reply"]), x  # no node record came back
    err = job.err.read_text()
    assert err.count(f"job secret: MUNGE (Slurm job {job.id}, munged at {slurm.dir}/munge/munge.socket.2)") == NODES, err
    assert "this job has no job secret" not in err, err
    refused = re.findall(r"store: refused an agent connection from (\S+): ", err)
    assert refused == [slurm.ctld_addr], err
    assert sum("show config" in l for l in slurm.scontrol_calls()) >= NODES, slurm.scontrol_calls()


def test_failing_rank_ends_job_with_its_code(slurm, tmp_path):
    out = out_dir(tmp_path)
    job = slurm.sbatch(job_body(rankrun_cmd(SCRIPTS / "sl_fail.py")), nodes=NODES, name="fail", out_dir=out,
                       env={"SL_OUT": out, "SL_FAIL_RANK": 4, "SL_FAIL_CODE": 3, "SL_FAIL_AFTER": 1})
    info = slurm.wait_done(job, timeout=60)
    failed = float((out / "failed-4").read_text().split()[0])
    assert info["ExitCode"] == "3:0", f"{info}\n{job.output()}"
    assert info["JobState"] == "FAILED", info
    # every node's rankrun exited with the root cause's code
    codes = srun_errors(job.err.read_text())
    assert codes == {n: 3 for n in slurm.nodes}, job.output()
    end_to_end = job.ended - job.submitted
    failure_to_end = job.ended - failed
    m = re.search(r"srun exited \d+ at (\d+\.\d+)", job.out.read_text())
    srun_back = float(m.group(1)) - failed if m else float("nan")
    print(f"\n[timing] job {job.id}: sbatch -> job ended {end_to_end:.2f}s; rank 4 failed -> srun returned "
          f"{srun_back:.2f}s, -> job ended (seen by polling) {failure_to_end:.2f}s")
    assert failure_to_end < 10, f"the job took {failure_to_end:.1f}s to end after the failure"


# --- 3. scancel leaves nothing ----------------------------------------------------------------
def test_scancel_leaves_nothing(slurm, tmp_path):
    out = out_dir(tmp_path)
    job = slurm.sbatch(job_body(rankrun_cmd(SCRIPTS / "sl_sig.py")), nodes=NODES, name="cancel", out_dir=out,
                       env={"SL_OUT": out})
    ready = wait_files(out, "ready-*[0-9]", WORLD, 60, job, slurm)
    workers = [int(f.read_text().split()[1]) for f in ready]
    launchers = {n: slurm.pids_of(n, "rankrun") for n in slurm.nodes}
    assert all(launchers.values()), f"no rankrun seen on some node: {launchers}"
    seen = slurm.job_processes()
    assert set(seen) >= set(slurm.nodes), seen
    seen_pids = {p: start_time(p) for p in workers + [p for ps in launchers.values() for p in ps]}
    t0 = time.monotonic()
    slurm.cancel(job)
    info = slurm.wait_done(job, timeout=30)
    assert info["JobState"] == "CANCELLED", info
    left = slurm.wait_quiet(timeout=15)
    quiet = time.monotonic() - t0
    assert not left, f"left behind after scancel: {left}"
    still = [p for p, start in seen_pids.items() if start_time(p) == start]
    assert not still, [f"{p}: {Path(f'/proc/{p}/cmdline').read_bytes()!r}" for p in still]
    print(f"\n[timing] job {job.id}: scancel -> nothing left on any node {quiet:.2f}s")


# --- 4. preemption: SIGUSR1 forwarded, then SIGTERM -> 120 (or requeue) ----------------------
def start_signal_job(slurm, tmp_path, *rr_extra, sbatch_opts=()):
    out = out_dir(tmp_path)
    rc_dir = out / "rc"
    rc_dir.mkdir()
    job = slurm.sbatch(job_body(rankrun_cmd(SCRIPTS / "sl_sig.py", *rr_extra), record_rc=rc_dir), *sbatch_opts,
                       nodes=NODES, name="preempt", out_dir=out, env={"SL_OUT": out})
    wait_files(out, "ready-*[0-9]", WORLD, 60, job, slurm)
    return job, out, rc_dir


def signals_seen(out, name):
    seen = {}
    for f in out.glob("sig-*.log"):
        rank = int(f.stem.split("-")[1])
        seen[rank] = [float(l.split()[0]) for l in f.read_text().splitlines() if l.split()[1:] == [name]]
    return seen


def wait_signal_everywhere(out, name, timeout, since):
    deadline = time.monotonic() + timeout
    while True:
        seen = signals_seen(out, name)
        if len([r for r, ts in seen.items() if ts]) == WORLD:
            return max(min(ts) for ts in seen.values()) - since
        if time.monotonic() > deadline:
            pytest.fail(f"{name} reached only ranks {sorted(r for r, ts in seen.items() if ts)} in {timeout}s")
        time.sleep(0.05)


def usr1_then_forward_check(slurm, job, out):
    """scancel --signal=USR1 reaches every worker and stops nothing; a SIGUSR2 sent to rankrun
    alone (by pid, on every node) reaches every worker: that one can only come through rankrun."""
    t0 = time.time()
    slurm.cancel(job, "--signal=USR1")
    usr1 = wait_signal_everywhere(out, "SIGUSR1", 10, t0)
    time.sleep(0.5)
    assert slurm.state(job) == "RUNNING", slurm.show_job(job)
    # Slurm signalled every process of the step itself: rankrun must not send it again.
    twice = {r: ts for r, ts in signals_seen(out, "SIGUSR1").items() if len(ts) != 1}
    assert not twice, f"SIGUSR1 not exactly once: {twice}\n{job.output()}"
    launchers = {n: slurm.launcher_pids(n) for n in slurm.nodes}
    assert all(len(p) == 1 for p in launchers.values()), launchers
    t1 = time.time()
    for (pid,) in launchers.values():
        os.kill(pid, signal.SIGUSR2)
    usr2 = wait_signal_everywhere(out, "SIGUSR2", 10, t1)
    assert slurm.state(job) == "RUNNING", slurm.show_job(job)
    return usr1, usr2


def test_preempt_signal_then_term_exits_120_everywhere(slurm, tmp_path):
    job, out, rc_dir = start_signal_job(slurm, tmp_path)
    usr1, usr2 = usr1_then_forward_check(slurm, job, out)
    t0 = time.time()
    slurm.cancel(job)  # SIGTERM to every process of the job, SIGKILL after KillWait=5
    info = slurm.wait_done(job, timeout=30)
    files = wait_files(rc_dir, "rc-*", NODES, 10, job, slurm)
    codes = {f.name[3:]: int(f.read_text()) for f in files}
    print(f"\n[timing] job {job.id}: scancel --signal=USR1 -> every worker {usr1:.2f}s; SIGUSR2 to rankrun -> "
          f"every worker {usr2:.2f}s; scancel -> job ended {job.ended - t0:.2f}s; rankrun codes {codes}")
    assert codes == {n: PREEMPTED for n in slurm.nodes}, f"{codes}\n{info}\n{job.output()}"
    assert not [l for l in slurm.scontrol_calls() if "requeue" in l], slurm.scontrol_calls()


def test_preempt_with_requeue_requeues_once(slurm, tmp_path):
    """--requeue-on-preempt: at the preempt signal node 0's rankrun runs `scontrol requeue` once;
    Slurm then stops the job (SIGTERM: 120 on every node, as preempted) and queues it again."""
    job, out, rc_dir = start_signal_job(slurm, tmp_path, "--requeue-on-preempt", sbatch_opts=("--requeue",))
    t0 = time.time()
    slurm.cancel(job, "--signal=USR1")
    usr1 = wait_signal_everywhere(out, "SIGUSR1", 10, t0)
    deadline = time.monotonic() + 30
    while True:
        info = slurm.show_job(job)
        if int(info.get("Restarts", "0")) >= 1:
            break
        if time.monotonic() > deadline:
            pytest.fail(f"not requeued in 30s: {info}\ncalls: {slurm.scontrol_calls()}\n{job.output()}")
        time.sleep(0.1)
    requeued = time.time() - t0
    files = wait_files(rc_dir, "rc-*", NODES, 15, job, slurm)
    stopped = time.time() - t0
    codes = {f.name[3:]: int(f.read_text()) for f in files}
    calls = [l for l in slurm.scontrol_calls() if " requeue " in f" {l} "]
    time.sleep(1)
    again = slurm.show_job(job)
    print(f"\n[timing] job {job.id}: scancel --signal=USR1 -> every worker {usr1:.2f}s, -> Restarts=1 "
          f"{requeued:.2f}s, -> every rankrun exited {stopped:.2f}s; then {again.get('JobState')} "
          f"Restarts={again.get('Restarts')}; rankrun codes {codes}; requeue calls {calls}")
    assert codes == {n: PREEMPTED for n in slurm.nodes}, f"{codes}\n{job.output()}"
    assert len(calls) == 1, calls
    assert calls[0].split()[1] == slurm.nodes[0] and calls[0].split()[-1] == job.id, calls
    assert again.get("Restarts") == "1" and again.get("JobState") in ("PENDING", "RUNNING", "CONFIGURING",
                                                                      "REQUEUED"), again
    slurm.cancel(job)
    slurm.wait_done(job, timeout=30)


# --- 5. wrong set-ups are usage errors that say what to do ------------------------------------
def test_wrong_setups_are_usage_errors(slurm, tmp_path):
    out = out_dir(tmp_path)
    rr = rankrun_cmd(SCRIPTS / "sl_env.py")
    two_tasks = slurm.sbatch(job_body(rr), nodes=1, ntasks_per_node=2, name="twotasks", out_dir=out,
                             env={"SL_OUT": out})
    in_batch = slurm.sbatch(f"{rr}\n", nodes=2, name="inbatch", out_dir=out, env={"SL_OUT": out})
    a = slurm.wait_done(two_tasks, timeout=30)
    b = slurm.wait_done(in_batch, timeout=30)
    err_a, err_b = two_tasks.err.read_text(), in_batch.err.read_text()
    assert a["ExitCode"] == f"{USAGE}:0", f"{a}\n{two_tasks.output()}"
    assert "--slurm-tasks-per-node-ok" in err_a and "ntasks-per-node=1" in err_a, err_a
    assert b["ExitCode"] == f"{USAGE}:0", f"{b}\n{in_batch.output()}"
    assert "srun" in err_b and "batch script" in err_b, err_b
    assert not list(out.glob("rank-*.json")), "a worker started"


# --- the rig itself ------------------------------------------------------------------------------
def test_second_rig_comes_up_beside_and_leaves_nothing(slurm, tmp_path):
    """A second cluster beside the module's (as under pytest-xdist) runs a step, and its teardown
    leaves no namespace, daemon, cgroup or directory behind."""
    from slurm_rig import SlurmRig

    other = SlurmRig().up()
    try:
        assert other.x != slurm.x and other.name != slurm.name
        r = other.srun("-N3", "--ntasks-per-node=1", "-l", "sh", "-c", "echo $SLURMD_NODENAME", timeout=30)
        assert r.returncode == 0 and sorted(r.stdout.split()) == ["0:", "1:", "2:", "n1", "n2", "n3"], r
        pids = [p.pid for p in other.daemons.values()]
        namespaces, directory, cgroup = list(other.created), other.dir, other.cgroup
    finally:
        problems = other.down()
    print(f"\n[timing] second rig: up {other.setup_s:.2f}s, down {other.teardown_s:.2f}s")
    assert not problems, problems
    from netns import list_namespaces
    assert not set(namespaces) & set(list_namespaces())
    assert not [p for p in pids if os.path.exists(f"/proc/{p}")], pids
    assert not directory.exists() and (cgroup is None or not cgroup.exists())
    # the module's cluster is untouched
    assert slurm.client("scontrol", "ping").returncode == 0
