"""The job secret, on network-namespace hosts (netns.py): three nodes of a job and a fourth host
that is not part of it. With a secret, every node proves it to the store host (and the store
host to every node) in the store's key-space handshake; the fourth host, speaking the store's
wire protocol by hand (scripts/hostile_agent.py), tries what issue 24 found possible: a forged
stop notice, a claim of node 2, a SET of join/x, reading the node records and leases, choosing
the workers' key space "attempt_0" by name, the handshake without a proof and with a wrong one.
Each is refused (the store closes the connection, having given nothing), the store host logs
the outsider's address once, and the job ends with exit 0 on every node.

An outsider holding every connection the store may take (scripts/conn_flood.py) before the
other nodes start does not keep them out: the store closes its oldest silent connection for each
newcomer.

Also: nodes whose secrets differ fail at the rendezvous (121) saying so; a multi-node job
without a secret warns once on every node and still runs; a secret file that others can read,
or that is empty, is a usage error naming the file; a single node says nothing."""
import json
import os
import re
import time

import pytest

from harness import PYTHON, RANKRUN, SCRIPTS, TORCH_TESTS, run
from netns import finish_all, hosts, report  # noqa: F401  (hosts is the fixture)
from outsider import FORGED, WORKER_REFUSED, assert_nothing_given, attack, refused_lines, value

pytestmark = TORCH_TESTS

PORT = 29500
NPROC = 2
# No test here loses a node: the node timeout is long enough (a reply is awaited a third of it)
# that a store busy with an outsider's flood beside six workers starting torch on 2 cores is still
# a store that answers. At 3 s, the store host's own node once called its store lost after a
# 1 s wait for a reply.
NODE_TIMEOUT = 10
TERM_TIMEOUT = 2
RDZV_FAILED, USAGE = 121, 2
TRAIN = SCRIPTS / "elastic_train.py"  # init_process_group, all_reduce, sleep (ends early on $GO_FILE), barrier
FLOOD = SCRIPTS / "conn_flood.py"
ATTACKS = ("forge-stop", "claim-node", "join", "read-nodes", "no-proof", "wrong-proof", "attempt-by-name",
           "attempt-hello", "worker")
NO_SECRET = "this job has no job secret"


def secret_file(tmp_path, name, text, mode=0o600):
    path = tmp_path / name
    path.write_text(text)
    path.chmod(mode)
    return path


def start(rig, tmp_path, host, args, env=None, **kw):
    tmp = tmp_path / f"tmp-h{host}"
    tmp.mkdir(exist_ok=True)
    full_env = {"PYTHON_EXEC": PYTHON, "TMPDIR": str(tmp), "OMP_NUM_THREADS": "1"}
    full_env.update(env or {})
    proc = rig.host(host).popen([RANKRUN, f"--nproc-per-node={NPROC}", f"--node-timeout={NODE_TIMEOUT}",
                                 f"--term-timeout={TERM_TIMEOUT}", *args], env=full_env, **kw)
    proc.tmpdir = tmp
    return proc


def static_args(rig, node_rank, nnodes=3, conf=(), script_args=("30",)):
    conf_arg = [f"--rdzv-conf={','.join(conf)}"] if conf else []
    return [f"--nnodes={nnodes}", f"--node-rank={node_rank}", f"--master-addr={rig.host(0).addr}",
            f"--master-port={PORT}", *conf_arg, TRAIN, *script_args]


def elastic_args(rig, conf=(), script_args=("30",)):
    return ["--nnodes=3", "--rdzv-backend=c10d", f"--rdzv-endpoint={rig.host(0).addr}:{PORT}", "--rdzv-id=job1",
            f"--rdzv-conf={','.join(('last_call_timeout=1', 'join_timeout=20', *conf))}", TRAIN, *script_args]


def attack_node0(rig, host, run_id="none"):
    """Every attack from `host` on node 0's store."""
    return attack(rig, host, rig.host(0).addr, PORT, ATTACKS, run_id)


def check_refused(results, outs):
    """Every attack was closed, and got nothing but a refusal (or the challenge of a handshake that
    then failed): no node record, no lease, no key list, no "joined"."""
    assert_nothing_given(results, outs, ("forge-stop", "claim-node", "join", "read-nodes", "attempt-by-name", "worker"))
    assert results["no-proof"][0] == value(b"refused:no job secret"), results["no-proof"]
    assert results["attempt-hello"][0] == value(b"refused:no job secret"), results["attempt-hello"]
    wrong = results["wrong-proof"][0]
    assert wrong.startswith(value(b"x" * 42)[:8] + b"challenge:"), wrong
    assert wrong[50:] == value(b"refused:wrong job secret"), wrong


def test_static_job_with_a_secret_refuses_an_outsider(hosts, tmp_path):
    """Three nodes share a secret, each from another source: --rdzv-conf secret_file= (node 0),
    RANKRUN_JOB_SECRET_FILE (node 1), systemd's credential in $CREDENTIALS_DIRECTORY (node 2).
    While their workers run, host 3 tries every attack. Each is refused, host 0 logs host 3's
    address once, no node warns about a missing secret, and the job ends 0 everywhere."""
    rig = hosts(4)
    text = "the job's secret: 4f1c2a\n"
    conf_file = secret_file(tmp_path, "conf.secret", text)
    env_file = secret_file(tmp_path, "env.secret", text)
    creds = tmp_path / "credentials"
    creds.mkdir()
    secret_file(creds, "rankrun-job-secret", text.rstrip("\n"), mode=0o400)  # without the line end: the same secret
    go = tmp_path / "go"
    envs = [{}, {"RANKRUN_JOB_SECRET_FILE": env_file}, {"CREDENTIALS_DIRECTORY": creds}]
    t0 = time.monotonic()
    procs = [start(rig, tmp_path, n, static_args(rig, n, conf=[f"secret_file={conf_file}"] if n == 0 else []),
                   env={"GO_FILE": go, **envs[n]}) for n in range(3)]
    for p in procs:
        assert p.wait_for(r"\bsum=6\b", NPROC, timeout=60), report(finish_all(procs, 1, t0))
    results = attack_node0(rig, 3)
    go.touch()
    outs = finish_all(procs, timeout=60, since=t0)
    for o in outs:
        assert o.returncode == 0, report(outs)
        assert NO_SECRET not in o.stderr, report(outs)
        for forged in FORGED:
            assert forged not in o.stderr, report(outs)
    check_refused(results, outs)
    outsider = rig.host(3).addr
    assert [a for a, _ in refused_lines(outs[0])] == [outsider], report(outs)  # once, with its address
    assert refused_lines(outs[0])[0][1].startswith("no job secret"), report(outs)
    # A worker's connection from a host that is not the job's: refused, logged once.
    assert WORKER_REFUSED.findall(outs[0].stderr) == [outsider], report(outs)
    for o in outs[1:]:
        assert refused_lines(o) == [], report(outs)


def test_elastic_job_with_a_secret_refuses_an_outsider(hosts, tmp_path):
    """The same attacks on a c10d job (the join is an elastic round's): no new round, no refusal
    of a member, exit 0 on every node after one round."""
    rig = hosts(4)
    secret = secret_file(tmp_path, "job.secret", "c10d secret")
    go = tmp_path / "go"
    t0 = time.monotonic()
    procs = [start(rig, tmp_path, h, elastic_args(rig, conf=[f"secret_file={secret}"]), env={"GO_FILE": go})
             for h in range(3)]
    for p in procs:
        assert p.wait_for(r"\bsum=6\b", NPROC, timeout=60), report(finish_all(procs, 1, t0))
    results = attack_node0(rig, 3, run_id="job1")
    go.touch()
    outs = finish_all(procs, timeout=60, since=t0)
    for o in outs:
        assert o.returncode == 0, report(outs)
        assert "rankrun: round 0: 3 nodes" in o.stderr, report(outs)
        assert "round 1" not in o.stderr, report(outs)
        assert NO_SECRET not in o.stderr, report(outs)
    check_refused(results, outs)
    assert [a for a, _ in refused_lines(outs[0])] == [rig.host(3).addr], report(outs)


@pytest.mark.parametrize("kind", ["static", "c10d"])
def test_an_outsider_holding_every_connection_does_not_keep_the_nodes_out(hosts, tmp_path, kind):
    """Node 0 (the store host) runs with 700 open files (its store takes 444 connections, 76 of them kept for the
    nodes' links). Before the other nodes start, host 3 opens 600 connections, silent but the
    first (which sends one byte), and keeps opening those the store closes. Nodes 1 and 2 still join and their workers connect: the
    store closes the outsider's oldest silent connection for each newcomer, says so once with
    its address, and the job ends 0 on every node."""
    import resource

    rig = hosts(4)
    secret = secret_file(tmp_path, "job.secret", "flood secret")
    conf = [f"secret_file={secret}"]

    def args(n):
        return static_args(rig, n, conf=conf) if kind == "static" else elastic_args(rig, conf=conf)

    go, stop_flood = tmp_path / "go", tmp_path / "stop-flood"

    def few_files():
        resource.setrlimit(resource.RLIMIT_NOFILE, (700, 700))

    t0 = time.monotonic()
    procs = [start(rig, tmp_path, 0, args(0), env={"GO_FILE": go}, preexec_fn=few_files)]
    flood = rig.host(3).popen([PYTHON, FLOOD, rig.host(0).addr, PORT, 600, stop_flood, "first-speaks"])
    try:
        assert flood.wait_for(r"^held \d+", timeout=30), flood.stdout
        held = int(re.search(r"^held (\d+)", flood.stdout, re.M).group(1))
        assert 300 < held < 600, flood.stdout + report(finish_all(procs, 1, t0))  # the store's limit, less node 0's own connections
        procs += [start(rig, tmp_path, n, args(n), env={"GO_FILE": go}) for n in (1, 2)]
        for p in procs:
            assert p.wait_for(r"\bsum=6\b", NPROC, timeout=60), report(finish_all(procs, 1, t0))
        # The outsider's first connection began a request: the silent ones went first, though it is the oldest.
        assert "first closed" not in flood.stdout, flood.stdout + report(finish_all(procs, 1, t0))
        go.touch()
        outs = finish_all(procs, timeout=60, since=t0)
    finally:
        stop_flood.touch()
    result = json.loads(flood.finish(30).stdout.splitlines()[-1])
    for o in outs:
        assert o.returncode == 0, report(outs)
    outsider = rig.host(3).addr
    made_room = re.findall(r"^rankrun: warning: store: closed a connection from (\S+) that had not said what it is, "
                           r"to make room \(\d+ connections open, the store's limit\)$", outs[0].stderr, re.M)
    assert made_room == [outsider], report(outs)
    assert "accept failed" not in outs[0].stderr, report(outs)
    assert "refusing connections from" not in outs[0].stderr, report(outs)
    assert result["closed_by_store"] > 0, result


def test_nodes_with_different_secrets_fail_at_the_rendezvous(hosts, tmp_path):
    """Node 1 has another secret, node 2 none: each fails at once (121), saying the job secrets
    differ; the store host logs both peers and ends at the rendezvous timeout (121)."""
    rig = hosts(3)
    mine = secret_file(tmp_path, "a.secret", "secret A")
    other = secret_file(tmp_path, "b.secret", "secret B")
    t0 = time.monotonic()
    procs = [start(rig, tmp_path, 0, static_args(rig, 0, conf=[f"secret_file={mine}", "timeout=8"], script_args=("0",))),
             start(rig, tmp_path, 1, static_args(rig, 1, conf=[f"secret_file={other}"], script_args=("0",))),
             start(rig, tmp_path, 2, static_args(rig, 2, script_args=("0",)))]
    outs = finish_all(procs, timeout=60, since=t0)
    for o in outs:
        assert o.returncode == RDZV_FAILED, report(outs)
    a0 = rig.host(0).addr
    assert (f"the job secrets differ: the store host {a0}:{PORT} refused this connection: wrong job secret; give "
            f"every node the same secret (this node's is from --rdzv-conf secret_file={other})") in outs[1].stderr, report(outs)
    assert (f"the job secrets differ: the store host {a0}:{PORT} refused this connection: no job secret; give every "
            "node the same secret (this node has none") in outs[2].stderr, report(outs)
    for o in outs[1:]:  # at once, not at the rendezvous timeout
        assert next(t for t, l in o.timed_err if "the job secrets differ" in l) < 5, report(outs)
    refused = dict(refused_lines(outs[0]))
    assert refused == {rig.host(1).addr: "wrong job secret", rig.host(2).addr: "no job secret"}, report(outs)


def test_a_job_without_a_secret_warns_once_on_every_node(hosts, tmp_path):
    """Two nodes, no secret: the job runs, and each node says once what an outsider could do."""
    rig = hosts(2)
    t0 = time.monotonic()
    procs = [start(rig, tmp_path, n, static_args(rig, n, nnodes=2, script_args=("0",))) for n in range(2)]
    outs = finish_all(procs, timeout=60, since=t0)
    for o in outs:
        assert o.returncode == 0, report(outs)
        assert o.stderr.count(NO_SECRET) == 1, report(outs)
        line = next(l for l in o.stderr.splitlines() if NO_SECRET in l)
        assert f"{rig.host(0).addr}:{PORT}" in line and "--rdzv-conf secret_file=PATH" in line, line


def test_an_unfit_secret_file_is_a_usage_error(tmp_path):
    """Before anything starts: a secret file others can read, an empty one, a missing one."""
    base = ["--nnodes=2", "--node-rank=1", "--master-addr=127.0.0.1", "--master-port=1", "--nproc-per-node=1"]
    shared = secret_file(tmp_path, "shared.secret", "s", mode=0o644)
    r = run(base + [f"--rdzv-conf=secret_file={shared}", TRAIN], env={"TMPDIR": str(tmp_path)}, timeout=30)
    assert r.returncode == USAGE, r
    assert (f"the job secret file {shared} (--rdzv-conf secret_file={shared}) can be read or written by others than "
            f"its owner (mode 0644); chmod 600 {shared}") in r.stderr, r
    empty = secret_file(tmp_path, "empty.secret", "\n")
    r = run(base + [TRAIN], env={"TMPDIR": str(tmp_path), "RANKRUN_JOB_SECRET_FILE": str(empty)}, timeout=30)
    assert r.returncode == USAGE, r
    assert f"the job secret file {empty} (RANKRUN_JOB_SECRET_FILE={empty}) is empty" in r.stderr, r
    r = run(base + [TRAIN], env={"TMPDIR": str(tmp_path), "RANKRUN_JOB_SECRET_FILE": str(tmp_path / "nope")}, timeout=30)
    assert r.returncode == USAGE, r
    assert f"cannot open the job secret file {tmp_path / 'nope'}" in r.stderr, r
    assert sorted(os.listdir(tmp_path)) == ["empty.secret", "shared.secret"], os.listdir(tmp_path)  # nothing else


def test_a_single_node_needs_no_secret_and_says_nothing(tmp_path):
    r = run(["--nproc-per-node=1", TRAIN, "0"], env={"TMPDIR": str(tmp_path)}, timeout=60)
    assert r.returncode == 0, r
    assert "job secret" not in r.stderr, r
