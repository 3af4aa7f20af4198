"""Faults in the middle of collective traffic, on network-namespace hosts (netns.py): every
worker runs gloo all_reduce in a loop (scripts/traffic.py) when the fault comes, so the
survivors' workers fail at once ("Connection closed by peer") and the fault reaches rankrun
twice: as its own workers' failure and, later, as the other node's lapsed lease. What docs/multi-node.md
promises, per fault:

  static job, a node's rankrun SIGKILLed   the survivors exit 122 naming the lost node (not
                                           their own workers' "connection closed")
  static job, node 0's rankrun SIGKILLed   the others exit 123: they lost the store host
  elastic job, a node's rankrun SIGKILLed  the survivors restart in a new round without it,
                                           within --node-timeout, spending no restart, and
                                           finish with 0 (c10d and etcd; with etcd also when
                                           the node was the coordinator)

Every test goes through the `hosts` fixture: nothing may be left in any namespace."""
import os
import re
import shutil
import signal
import time

import pytest

from harness import PYTHON, RANKRUN, SCRIPTS, TORCH_TESTS
from netns import finish_all, hosts, report  # noqa: F401  (hosts is the fixture)
from elastic_common import line_time, now_report, records, start_node, wait_all
from test_elastic_etcd import ETCD_PORT, coordinator_host, etcd_hosts  # noqa: F401  (etcd_hosts is a fixture)

pytestmark = TORCH_TESTS

# make test runs the tests marked torch_commit again with torch 2.14; make test-torch runs them
# all with each torch.

PORT = 29600
NPROC = 2
NODE_TIMEOUT = 3
TERM_TIMEOUT = 2
SLACK = 10  # seconds allowed beyond a timeout under test (2 cores, 2 tests at once)
NODE_LOST = 122
TRAFFIC = SCRIPTS / "traffic.py"


def node_env(tmp_path, host):
    tmp = tmp_path / f"tmp-h{host}"
    tmp.mkdir(exist_ok=True)
    return tmp, {"PYTHON_EXEC": PYTHON, "TMPDIR": str(tmp), "OMP_NUM_THREADS": "1"}


def start_static(rig, tmp_path, host, script_args, extra=(), go_file=None, node_timeout=NODE_TIMEOUT, env=None):
    tmp, full_env = node_env(tmp_path, host)
    full_env.update(env or {})
    env = full_env
    if go_file:
        env["GO_FILE"] = str(go_file)
    args = [RANKRUN, "--nnodes=3", f"--node-rank={host}", f"--master-addr={rig.host(0).addr}", f"--master-port={PORT}",
            f"--nproc-per-node={NPROC}", f"--node-timeout={node_timeout}", f"--term-timeout={TERM_TIMEOUT}", *extra,
            TRAFFIC, *script_args]
    p = rig.host(host).popen(args, env=env)
    p.tmpdir = tmp
    return p


def start_elastic(rig, tmp_path, host, nnodes, script_args, extra=()):
    tmp, env = node_env(tmp_path, host)
    args = [RANKRUN, f"--nnodes={nnodes}", f"--nproc-per-node={NPROC}", "--rdzv-backend=c10d",
            f"--rdzv-endpoint={rig.host(0).addr}:{PORT}", "--rdzv-id=chaos",
            "--rdzv-conf=last_call_timeout=1,join_timeout=60", f"--node-timeout={NODE_TIMEOUT}",
            f"--term-timeout={TERM_TIMEOUT}", *extra, TRAFFIC, *script_args]
    p = rig.host(host).popen(args, env=env)
    p.tmpdir = tmp
    return p


def elastic_traffic(rig, tmp_path, script_args=("120", "4:2"), extra=("--max-restarts=1",)):
    """A 2:3 c10d job of three nodes in all_reduce (round 1, of world 4, ends after 2 s): the
    nodes' Procs, once every worker of round 0 has done a step."""
    t0 = time.monotonic()
    procs = [start_elastic(rig, tmp_path, h, "2:3", list(script_args), extra=list(extra)) for h in range(3)]
    wait_all(procs, r"\] step \d+ RANK=\d+ WORLD_SIZE=6", NPROC, timeout=60, since=t0)
    return procs


def static_traffic(rig, tmp_path, seconds="120", go=None, node_timeout=NODE_TIMEOUT):
    """A static job of three nodes, every worker in all_reduce (it ends after `seconds`, or once
    the file `go` exists): the nodes' Procs, once every worker has done a step."""
    t0 = time.monotonic()
    procs = [start_static(rig, tmp_path, h, [seconds], go_file=go, node_timeout=node_timeout) for h in range(3)]
    wait_all(procs, r"\] step \d+ ", NPROC, timeout=60, since=t0)
    return procs


def assert_nothing_left(rig, host, outs):
    left = rig.wait_empty(host, timeout=10)
    assert left == [], f"host {host}'s processes outlive its rankrun: {left}\n" + report(outs)


@pytest.mark.torch_commit
def test_static_node_killed_during_traffic_is_a_lost_node(hosts, tmp_path):
    """Three nodes in all_reduce; SIGKILL node 2's rankrun. The survivors' workers fail at once
    (gloo: connection closed by peer 10.x.x.3); that is held as a likely victim of node 2 until
    its lease lapses, and nodes 0 and 1 exit 122 naming node 2 as lost, not their own ranks."""
    rig = hosts(3)
    procs = static_traffic(rig, tmp_path)
    t_kill = time.monotonic()
    procs[2].signal(signal.SIGKILL)
    outs = finish_all(procs, timeout=NODE_TIMEOUT + SLACK + 20, since=t_kill)
    a2 = rig.host(2).addr
    assert outs[2].returncode == -signal.SIGKILL, report(outs)
    for o in outs[:2]:
        assert o.returncode == NODE_LOST, report(outs)
        assert o.elapsed <= NODE_TIMEOUT + SLACK, report(outs)
        assert f"Root cause: node 2 ({a2}) was lost (ranks 4-5)" in o.stderr, report(outs)
        assert "Root cause: rank" not in o.stderr, "a victim was called the root cause\n" + report(outs)
        # A survivor whose worker saw the peer go is told so; one whose workers were still
        # waiting in the ring when the lease lapsed has no victim to hold.
        if "Connection closed by peer" in o.stderr:
            assert re.search(r"lost its connection to node 2 .*holding its failure", o.stderr), report(outs)
    # A victim is held when a survivor's worker ends before node 2's lease lapses; one still
    # ending then (torch 2.x's gloo can take seconds to exit after the error) is stopped with the job.
    # (Each node's own table of its ranks: node 0's job summary also lists node 1's.)
    ended_first = [o for o in outs[:2] if re.search(r"^ +\d+ +\d+ +\d+ +(?!terminated by rankrun)\S", o.stderr, re.M)]
    assert not ended_first or any("holding its failure" in o.stderr for o in ended_first), \
        "no victim was held\n" + report(outs)
    assert "<- root cause" not in outs[0].stderr.split("job summary")[1], "a victim marked as the root cause\n" + report(outs)
    assert "node 2 10.213" in outs[0].stderr and "LOST (its lease lapsed" in outs[0].stderr, report(outs)
    assert_nothing_left(rig, 2, outs)


def test_static_store_host_killed_during_traffic_is_one_story(hosts, tmp_path):
    """Three nodes in all_reduce; SIGKILL node 0's rankrun (the store host). Nodes 1 and 2's
    workers fail at once naming node 0 as the peer they lost (held as victims); then their link
    to node 0 times out: each exits 123 and its report tells that one story (the store host was
    lost), not a rank's failure with exit code 123."""
    rig = hosts(3)
    procs = static_traffic(rig, tmp_path)
    t_kill = time.monotonic()
    procs[0].signal(signal.SIGKILL)
    outs = finish_all(procs, timeout=NODE_TIMEOUT + SLACK + 20, since=t_kill)
    assert outs[0].returncode == -signal.SIGKILL, report(outs)
    for o in outs[1:]:
        assert o.returncode == 123, report(outs)
        assert o.elapsed <= NODE_TIMEOUT + SLACK, report(outs)
        assert "lost the store host" in o.stderr, report(outs)
        assert "Root cause: rank" not in o.stderr and "<- root cause" not in o.stderr, report(outs)
        assert "exit code 123 (the store host was lost)" in o.stderr, report(outs)
    assert_nothing_left(rig, 0, outs)


@pytest.mark.parametrize("victim", [1, 2])
def test_elastic_node_killed_during_traffic_restarts_without_it(hosts, tmp_path, victim):
    """A 2:3 c10d job of three nodes in all_reduce, --max-restarts=1; SIGKILL one node's rankrun
    (not the store host's). The survivors' workers fail at once; the restart they start waits at
    the barrier for the dead node, and its lease lapsing ends that wait: round 1 forms with the
    two survivors within --node-timeout (+ slack), its workers finish, both exit 0 and the
    membership change spends no restart."""
    rig = hosts(3)
    procs = elastic_traffic(rig, tmp_path)
    t_kill = time.monotonic()
    procs[victim].signal(signal.SIGKILL)
    outs = finish_all(procs, timeout=NODE_TIMEOUT + SLACK + 60, since=t_kill)
    assert outs[victim].returncode == -signal.SIGKILL, report(outs)
    survivors = [o for i, o in enumerate(outs) if i != victim]
    for o in survivors:
        assert o.returncode == 0, report(outs)
        t_round = line_time(o, r"round 1: 2 nodes, world size 4")
        assert t_round is not None, report(outs)
        assert t_round <= NODE_TIMEOUT + SLACK, f"round 1 formed after {t_round} s\n" + report(outs)
        done = records(o, "done", 4)
        assert len(done) == NPROC, report(outs)
        for _, f in records(o, "start", 4):
            assert f["RESTART"] in ("0", "1"), report(outs)
    assert_nothing_left(rig, victim, outs)


def worker_pids(rig, host):
    """The pids of host `host`'s traffic workers."""
    found = []
    for pid in rig.pids(host):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            if b"python" in os.path.basename(argv[0]) and any(a.endswith(b"traffic.py") for a in argv):
                found.append(pid)
        except OSError:
            pass
    return found


def test_elastic_node_lost_at_the_restart_barrier_starts_the_next_round(hosts, tmp_path):
    """A 2:3 c10d job of three nodes in all_reduce, --max-restarts=1. A worker of node 1 is
    SIGKILLed (a failure of its own: the restart follows on every node) and node 2's rankrun with
    it: the restart waits at the barrier for node 2, which never comes. Its lapsed lease ends
    that wait: round 1 forms with nodes 0 and 1 within --node-timeout (+ slack), and the job
    finishes with 0 (before: the barrier waited for join_timeout, then 125)."""
    rig = hosts(3)
    procs = elastic_traffic(rig, tmp_path)
    victims = worker_pids(rig, 1)
    assert len(victims) == NPROC, victims
    t_kill = time.monotonic()
    os.kill(victims[0], signal.SIGKILL)
    procs[2].signal(signal.SIGKILL)
    outs = finish_all(procs, timeout=NODE_TIMEOUT + SLACK + 60, since=t_kill)
    for o in outs[:2]:
        assert o.returncode == 0, report(outs)
        assert re.search(r"restarting all workers", o.stderr), report(outs)
        t_round = line_time(o, r"round 1: 2 nodes, world size 4")
        assert t_round is not None, report(outs)
        assert t_round <= NODE_TIMEOUT + SLACK, f"round 1 formed after {t_round} s\n" + report(outs)
        assert len(records(o, "done", 4)) == NPROC, report(outs)
    assert_nothing_left(rig, 2, outs)


@pytest.mark.skipif(shutil.which("etcd") is None or shutil.which("etcdctl") is None,
                    reason="etcd and etcdctl (Debian's etcd-server, etcd-client) are not installed")
@pytest.mark.parametrize("kill_coordinator", [False, True], ids=["node", "coordinator"])
def test_etcd_node_killed_during_traffic_restarts_without_it(etcd_hosts, tmp_path, kill_coordinator):
    """A 2:3 etcd job of three nodes in all_reduce, --max-restarts=1; SIGKILL one node's rankrun
    (the coordinator elected in etcd, or another one). The survivors' workers fail at once and
    are held as its victims; its etcd lease lapses, the (new) coordinator starts round 1 with
    the two survivors within --node-timeout (+ slack), and both finish with 0 (before: 125
    after 68 s)."""
    rig, etcd = etcd_hosts(3)
    ep = f"{etcd.addr}:{ETCD_PORT}"
    t0 = time.monotonic()
    procs = [start_node(rig, tmp_path, h, "2:3", "etcd", ep, ["120", "4:2"], extra=["--max-restarts=1"], script=TRAFFIC,
                        join_timeout=60) for h in range(3)]
    wait_all(procs, r"\] step \d+ RANK=\d+ WORLD_SIZE=6", NPROC, timeout=60, since=t0)
    coord = coordinator_host(etcd, procs, t0)
    victim = coord if kill_coordinator else max(h for h in range(3) if h != coord)
    t_kill = time.monotonic()
    procs[victim].signal(signal.SIGKILL)
    outs = finish_all(procs, timeout=NODE_TIMEOUT + SLACK + 60, since=t_kill)
    assert outs[victim].returncode == -signal.SIGKILL, report(outs)
    for o in outs:
        if o.host == victim:
            continue
        assert o.returncode == 0, report(outs)
        t_round = line_time(o, r"round 1: 2 nodes, world size 4")
        assert t_round is not None, report(outs)
        assert t_round <= NODE_TIMEOUT + SLACK, f"round 1 formed after {t_round} s\n" + report(outs)
        assert len(records(o, "done", 4)) == NPROC, report(outs)
    assert_nothing_left(rig, victim, outs)


# --- short and long faults: a pause, a cut cable ------------------------------------------------
FAULT_NODE_TIMEOUT = 5


def steps(p):
    return p.count(r"\] step \d+ ")


@pytest.mark.parametrize("fault", ["pause", "cut"])
def test_a_fault_shorter_than_the_node_timeout_is_survived(hosts, tmp_path, fault):
    """Three nodes in all_reduce, --node-timeout=5. Node 2's rankrun is paused (SIGSTOP) for 2 s,
    or its cable is cut for 2 s, then restored: no node is declared lost, the traffic goes on,
    and the job ends with 0 on every node when told to."""
    rig = hosts(3)
    go = tmp_path / "go"
    t0 = time.monotonic()
    procs = static_traffic(rig, tmp_path, "300", go, FAULT_NODE_TIMEOUT)
    if fault == "pause":
        procs[2].signal(signal.SIGSTOP)
        time.sleep(2)
        procs[2].signal(signal.SIGCONT)
    else:
        rig.cut(2)
        time.sleep(2)
        rig.plug(2)
    before = [steps(p) for p in procs]
    time.sleep(FAULT_NODE_TIMEOUT + 2)  # past the node timeout: a false loss would have come
    for p, b in zip(procs, before):
        assert p.poll() is None, now_report(procs, t0)
        assert p.wait_for(r"\] step \d+ ", b + 1, timeout=10), "the traffic stopped\n" + now_report(procs, t0)
    t_go = time.monotonic()
    go.touch()
    outs = finish_all(procs, timeout=SLACK + 20, since=t_go)
    for o in outs:
        assert o.returncode == 0, report(outs)
        assert "lost" not in o.stderr, report(outs)


@pytest.mark.parametrize("fault", ["pause", "cut"])
def test_a_fault_longer_than_the_node_timeout_loses_the_node(hosts, tmp_path, fault):
    """Three nodes in all_reduce, --node-timeout=5. Node 2's rankrun is paused (SIGSTOP), or its
    cable cut, for good: nodes 0 and 1 exit 122 naming node 2 within --node-timeout (+ slack).
    The cut-off node exits 123 on its own (it lost the store host); the paused one, once it
    runs again, ends too (122 or 123: it hears it was declared lost, or finds node 0 gone)
    and leaves nothing behind."""
    rig = hosts(3)
    procs = static_traffic(rig, tmp_path, "300", None, FAULT_NODE_TIMEOUT)
    t_fault = time.monotonic()
    if fault == "pause":
        procs[2].signal(signal.SIGSTOP)
    else:
        rig.cut(2)
    survivors = finish_all(procs[:2], timeout=FAULT_NODE_TIMEOUT + SLACK + 20, since=t_fault)
    a2 = rig.host(2).addr
    for o in survivors:
        assert o.returncode == NODE_LOST, report(survivors)
        assert o.elapsed <= FAULT_NODE_TIMEOUT + SLACK, report(survivors)
        assert f"Root cause: node 2 ({a2}) was lost (ranks 4-5)" in o.stderr, report(survivors)
    if fault == "pause":
        procs[2].signal(signal.SIGCONT)
        expected = (NODE_LOST, 123)
    else:
        expected = (123,)
    (last,) = finish_all(procs[2:], timeout=FAULT_NODE_TIMEOUT + SLACK + 20, since=t_fault)
    assert last.returncode in expected, report(survivors + [last])
    if fault == "cut":
        rig.plug(2)
    assert_nothing_left(rig, 2, survivors + [last])


SLOW_STORE_NODE_TIMEOUT = 6
STORE_STOP = 4  # seconds: past a reply's first wait (a third of the node timeout) and a lease interval


@pytest.mark.parametrize("when", ["rendezvous", "attempt"])
def test_a_store_host_stopped_shorter_than_the_node_timeout_only_delays_the_job(hosts, tmp_path, when):
    """--node-timeout=6. The store host's rankrun (node 0) is stopped (SIGSTOP) for 4 s: while
    node 1 waits in the rendezvous and node 2 starts, or while every worker is in all_reduce. Its
    system keeps acknowledging what the nodes send, so they wait for the replies (in the attempt
    saying so) instead of calling it lost, and the job ends 0 on every node when told."""
    rig = hosts(3)
    go = tmp_path / "go"
    nt = SLOW_STORE_NODE_TIMEOUT
    t0 = time.monotonic()
    if when == "rendezvous":
        procs = [start_static(rig, tmp_path, h, ["300"], go_file=go, node_timeout=nt) for h in (0, 1)]
        # Node 1 says it waits, then waits 5 s more for the rendezvous to complete: the store host
        # is stopped before that wait ends, so that its end (a CANCEL_WAIT) awaits a reply 3.5 s.
        assert procs[1].wait_for("waiting for nodes", timeout=60, stream="err"), now_report(procs, t0)
        time.sleep(4.5)
        procs[0].signal(signal.SIGSTOP)
        procs.append(start_static(rig, tmp_path, 2, ["300"], go_file=go, node_timeout=nt))
        time.sleep(STORE_STOP)
        procs[0].signal(signal.SIGCONT)
        wait_all(procs, r"\] step \d+ ", NPROC, timeout=60, since=t0)
    else:
        procs = static_traffic(rig, tmp_path, "300", go, nt)
        procs[0].signal(signal.SIGSTOP)
        time.sleep(STORE_STOP)
        procs[0].signal(signal.SIGCONT)
        before = [steps(p) for p in procs]
        for p, b in zip(procs, before):
            assert p.wait_for(r"\] step \d+ ", b + 1, timeout=10), "the traffic stopped\n" + now_report(procs, t0)
    go.touch()
    outs = finish_all(procs, timeout=SLACK + 30, since=t0)
    for o in outs:
        assert o.returncode == 0, report(outs)
        assert "lost" not in o.stderr, report(outs)
    if when == "attempt":
        for o in outs[1:]:
            assert re.search(r"waiting for the store host \S+: \d+ s without a reply; it is connected; giving up "
                             r"after 6 s", o.stderr), report(outs)


def test_a_store_host_stopped_past_the_node_timeout_is_lost(hosts, tmp_path):
    """--node-timeout=6. The store host's rankrun is stopped for good while every worker is in
    all_reduce: nodes 1 and 2 wait for its replies up to --node-timeout, then exit 123 saying it
    stopped answering on a connection its system kept; node 0, let go on, ends too and leaves
    nothing behind."""
    rig = hosts(3)
    nt = SLOW_STORE_NODE_TIMEOUT
    procs = static_traffic(rig, tmp_path, "300", None, nt)
    t_stop = time.monotonic()
    procs[0].signal(signal.SIGSTOP)
    others = finish_all(procs[1:], timeout=2 * nt + SLACK + 20, since=t_stop)
    for o in others:
        assert o.returncode == 123, report(others)
        assert o.elapsed <= 2 * nt + SLACK, report(others)  # the node timeout, after a lease interval's wait
        assert "lost the store host" in o.stderr and "kept acknowledging" in o.stderr, report(others)
    procs[0].signal(signal.SIGCONT)
    (first,) = finish_all(procs[:1], timeout=nt + SLACK + 20, since=t_stop)
    assert first.returncode != 0, report(others + [first])
    assert_nothing_left(rig, 0, others + [first])


@pytest.mark.skipif(shutil.which("etcd") is None or shutil.which("etcdctl") is None,
                    reason="etcd and etcdctl (Debian's etcd-server, etcd-client) are not installed")
def test_etcd_paused_shorter_than_the_node_timeout_is_survived(etcd_hosts, tmp_path):
    """A 3-node etcd job in all_reduce with --node-timeout=9; etcd is paused (SIGSTOP) for 5 s,
    longer than one request's timeout (a third of --node-timeout) but shorter than
    --node-timeout. The coordinator keeps coordinating (it used to resign after one failed
    request), no node is lost, the job goes on and ends with 0 when told to, with one summary."""
    rig, etcd = etcd_hosts(3)
    ep = f"{etcd.addr}:{ETCD_PORT}"
    go = tmp_path / "go"
    t0 = time.monotonic()
    procs = [start_node(rig, tmp_path, h, "3", "etcd", ep, ["300"], script=TRAFFIC, node_timeout=9,
                        env={"GO_FILE": str(go)}) for h in range(3)]
    wait_all(procs, r"\] step \d+ RANK=\d+ WORLD_SIZE=6", NPROC, timeout=60, since=t0)
    etcd.proc.signal(signal.SIGSTOP)
    time.sleep(5)
    etcd.proc.signal(signal.SIGCONT)
    time.sleep(9 + 2)  # past --node-timeout since the pause began
    for p in procs:
        assert p.poll() is None, now_report(procs, t0)
    t_go = time.monotonic()
    go.touch()
    outs = finish_all(procs, timeout=SLACK + 30, since=t_go)
    for o in outs:
        assert o.returncode == 0, report(outs)
        assert "lost" not in o.stderr and "stopped coordinating" not in o.stderr, report(outs)
    assert sum("rankrun: job summary" in o.stderr for o in outs) == 1, report(outs)


@pytest.mark.torch_commit
def test_a_worker_killed_during_traffic_is_the_root_cause_everywhere(hosts, tmp_path):
    """Three nodes in all_reduce; SIGKILL one worker of node 1. The other workers fail at once
    (their peer is gone; on nodes 0 and 2 they name node 1, and are held), while node 1
    publishes its own rank's death at once: every node exits 137 naming that rank."""
    rig = hosts(3)
    procs = static_traffic(rig, tmp_path)
    victims = worker_pids(rig, 1)
    assert len(victims) == NPROC, victims
    t_kill = time.monotonic()
    os.kill(victims[0], signal.SIGKILL)
    outs = finish_all(procs, timeout=SLACK + 20, since=t_kill)
    for o in outs:
        assert o.returncode == 128 + signal.SIGKILL, report(outs)
        assert o.elapsed <= SLACK, report(outs)
        assert re.search(r"Root cause: rank [23] \(local(_rank)? [01][,)].*killed by SIGKILL", o.stderr), report(outs)
