"""Elastic (dynamic) rendezvous on network-namespace hosts (netns.py), with real gloo workers
(scripts/elastic_train.py: all_reduce of a 1, so the sum is the world size). Every node runs the
same command, as with torchrun:

    rankrun --nnodes=MIN:MAX --nproc-per-node=2 --rdzv-backend=c10d --rdzv-endpoint=<host 0>:PORT
            --rdzv-id=job1 --rdzv-conf=last_call_timeout=1,join_timeout=20 --node-timeout=3 ...

Host 0 hosts the store because the endpoint is its eth0 address. Rounds: at MIN nodes a last call
runs, at MAX (or when it ends) the round closes and workers get that round's RANK/WORLD_SIZE; a
lost node or a newcomer (room under MAX) restarts the survivors in the next round without
spending --max-restarts; a node beyond MAX is a spare and exits 119 when the job ends; a round
that never reaches MIN within join_timeout fails with 121 on every waiting node.

Every test goes through the `hosts` fixture, whose teardown fails the test if any process is
left in any namespace, then kills by pid and deletes the namespaces."""
import re
import signal
import socket
import time

import pytest

from harness import TORCH_TESTS
from netns import finish_all, hosts, report  # noqa: F401  (hosts is the fixture)
from elastic_common import (LAST_CALL, NODE_TIMEOUT, NPROC, RDZV_CLOSED, RDZV_FAILED, SLACK, assert_summary,
                            assert_tmp_clean, check_round, line_time, node_map, now_report, records, start_node,
                            wait_all)

pytestmark = TORCH_TESTS

# make test runs the tests marked torch_commit again with torch 2.14; make test-torch runs them
# all with each torch.

PORT = 29400


# --- helpers ---------------------------------------------------------------------------------
def endpoint(rig):
    """Host 0's address and PORT: host 0 hosts the store because the endpoint is its address."""
    return f"{rig.host(0).addr}:{PORT}"


# --- the tests -------------------------------------------------------------------------------
@pytest.mark.torch_commit
def test_three_nodes_c10d_allreduce(hosts, tmp_path):
    """--nnodes=3 with c10d: one round of 3 nodes, world 6, the all_reduce sums to 6, ranks 0-5
    once each, every node exits 0.

    Also: the store host is decided from interface addresses. The namespaces share the machine's
    UTS name, so the hostname is the same on every host and does not resolve to host 0's eth0
    address; host 0 hosts the store only because the endpoint's HOST is one of its own
    addresses, and hosts 1 and 2 do not."""
    rig = hosts(3)
    ep = endpoint(rig)
    a0 = rig.host(0).addr
    try:
        resolved = socket.gethostbyname(socket.gethostname())
    except OSError:
        resolved = None
    assert resolved != a0, "the rig's hostname resolves to host 0: this test would not show anything"
    t0 = time.monotonic()
    procs = [start_node(rig, tmp_path, h, "3", "c10d", ep) for h in range(3)]
    outs = finish_all(procs, timeout=60, since=t0)
    for o in outs:
        assert o.returncode == 0, report(outs)
    check_round(outs, rig, 0, [0, 1, 2], 6, store=ep)
    for o in outs:
        for _, f in records(o, "start", 6):
            assert f["TORCHELASTIC_RESTART_COUNT"] == "0", report(outs)
    hosting = [o.host for o in outs if "rankrun: round 0: 3 nodes, world size 6 (this node hosts the store)" in o.stderr]
    assert hosting == [0], f"hosts {hosting} say they host the store\n" + report(outs)
    for o in outs[1:]:
        assert "rankrun: round 0: 3 nodes, world size 6" in o.stderr, report(outs)
        assert "rankrun: rounds:" not in o.stderr, report(outs)
    assert_summary(outs[0], [(3, 6)], 3, outs)
    assert_tmp_clean(outs)


def test_min_nodes_run_after_the_last_call(hosts, tmp_path):
    """--nnodes=2:3 with only two nodes: MIN is reached at once, the round closes when the last
    call (1 s) ends, and the job runs with world 4."""
    rig = hosts(2)
    ep = endpoint(rig)
    t0 = time.monotonic()
    procs = [start_node(rig, tmp_path, h, "2:3", "c10d", ep) for h in range(2)]
    outs = finish_all(procs, timeout=60, since=t0)
    for o in outs:
        assert o.returncode == 0, report(outs)
        closed = line_time(o, r"^rankrun: round 0: 2 nodes, world size 4")
        assert closed is not None and LAST_CALL - 0.2 <= closed <= LAST_CALL + SLACK, \
            f"round 0 closed at {closed} s, the last call is {LAST_CALL} s\n" + report(outs)
    check_round(outs, rig, 0, [0, 1], 4, store=ep)
    assert_summary(outs[0], [(2, 4)], 2, outs)
    assert_tmp_clean(outs)


@pytest.mark.torch_commit
def test_lost_node_restarts_the_survivors_with_a_smaller_world(hosts, tmp_path):
    """A 2:3 job of three nodes with --max-restarts=0; once every worker has done its all_reduce,
    SIGKILL host 2's rankrun (not the store host). Its lease lapses after --node-timeout, hosts 0
    and 1 stop their workers and restart in round 1 with world 4 (a membership change spends no
    restart, so --max-restarts=0 does not end the job) and finish with 0; host 2's workers go
    with its rankrun."""
    rig = hosts(3)
    ep = endpoint(rig)
    t0 = time.monotonic()
    # world 6 sleeps 60 s (it is interrupted), world 4 finishes at once
    procs = [start_node(rig, tmp_path, h, "2:3", "c10d", ep, ["60", "4:0"], extra=["--max-restarts=0"])
             for h in range(3)]
    wait_all(procs, r"\] sum=6 ", NPROC, timeout=40, since=t0)
    t_kill = time.monotonic()
    procs[2].signal(signal.SIGKILL)
    outs = finish_all(procs, timeout=NODE_TIMEOUT + SLACK + 30, since=t_kill)
    a2 = rig.host(2).addr
    assert outs[2].returncode == -signal.SIGKILL, report(outs)
    survivors = outs[:2]
    for o in survivors:
        assert o.returncode == 0, report(outs)
        t_lost = line_time(o, rf"stopping the job: node {re.escape(a2)} lost; restarting with 2 nodes, round 1$")
        assert t_lost is not None, report(outs)
        assert NODE_TIMEOUT - 1 <= t_lost <= NODE_TIMEOUT + SLACK, f"lost after {t_lost} s\n" + report(outs)
        # the first round's workers were stopped, not finished
        assert records(o, "done", 6) == [], report(outs)
    check_round(outs, rig, 0, [0, 1, 2], 6, done=False, store=ep)
    check_round(survivors, rig, 1, [0, 1], 4, store=ep)
    for o in survivors:
        for _, f in records(o, "start", 4):
            assert f["TORCHELASTIC_RESTART_COUNT"] == "0", "a membership change spent a restart\n" + report(outs)
    assert_summary(outs[0], [(3, 6), (2, 4)], 2, outs)
    left = rig.wait_empty(2, timeout=10)
    assert left == [], f"host 2's processes outlive its rankrun: {left}\n" + report(outs)
    assert_tmp_clean(outs)


def test_new_node_joins_a_running_job(hosts, tmp_path):
    """A 2:3 job runs on hosts 0 and 1 (world 4); host 2 then starts the same command: everyone
    restarts in round 1 with 3 nodes and world 6, and finishes with 0."""
    rig = hosts(3)
    ep = endpoint(rig)
    t0 = time.monotonic()
    args = ["60", "6:0"]  # world 4 sleeps (it is interrupted), world 6 finishes at once
    first = [start_node(rig, tmp_path, h, "2:3", "c10d", ep, args) for h in range(2)]
    wait_all(first, r"\] sum=4 ", NPROC, timeout=40, since=t0)
    t_join = time.monotonic()
    procs = first + [start_node(rig, tmp_path, 2, "2:3", "c10d", ep, args)]
    outs = finish_all(procs, timeout=60, since=t_join)
    a2 = rig.host(2).addr
    for o in outs:
        assert o.returncode == 0, report(outs)
    for o in outs[:2]:
        t = line_time(o, rf"stopping the job: node {re.escape(a2)} joined; restarting with 3 nodes, round 1$")
        assert t is not None and t <= SLACK, report(outs)
        assert records(o, "done", 4) == [], report(outs)
    check_round(outs[:2], rig, 0, [0, 1], 4, done=False, store=ep)
    assert "round 0:" not in outs[2].stderr, report(outs)  # the newcomer starts in round 1
    check_round(outs, rig, 1, [0, 1, 2], 6, store=ep)
    assert_summary(outs[0], [(2, 4), (3, 6)], 3, outs)
    assert_tmp_clean(outs)


def test_node_beyond_max_is_a_spare_and_exits_119(hosts, tmp_path):
    """--nnodes=1:2 on hosts 0 and 1, then host 2: the job is full, host 2 is told it waits as a
    spare, starts no worker, and exits 119 once the job ends (with 0 on hosts 0 and 1)."""
    rig = hosts(3)
    ep = endpoint(rig)
    go = tmp_path / "go"
    env = {"GO_FILE": str(go)}
    args = ["30", "2:60"]  # world 4 runs until `go` exists; world 2 (host 1 late) waits for host 1
    t0 = time.monotonic()
    first = [start_node(rig, tmp_path, h, "1:2", "c10d", ep, args, env=env) for h in range(2)]
    wait_all(first, r"^rankrun: round \d+: 2 nodes, world size 4", 1, timeout=30, since=t0, stream="err")
    spare = start_node(rig, tmp_path, 2, "1:2", "c10d", ep, args, env=env)
    procs = first + [spare]
    if not spare.wait_for(r"the job has its maximum of 2 nodes \(--nnodes=MIN:MAX\); this node waits as a spare",
                          timeout=SLACK + 5, stream="err"):
        pytest.fail("host 2 is not told it is a spare\n" + now_report(procs, t0))
    wait_all(first, r"\] sum=4 ", NPROC, timeout=40, since=t0)
    t_go = time.monotonic()
    go.touch()
    outs = finish_all(procs, timeout=30, since=t_go)
    assert [o.returncode for o in outs[:2]] == [0, 0], report(outs)
    last_round = int(re.findall(r"^rankrun: round (\d+): 2 nodes, world size 4", outs[0].stderr, re.M)[-1])
    check_round(outs[:2], rig, last_round, [0, 1], 4, store=ep)  # the spare is in no node map
    assert_summary(outs[0], [], 2, outs)
    s = outs[2]
    assert s.stdout == "", "the spare started workers\n" + report(outs)
    assert s.elapsed <= max(o.elapsed for o in outs[:2]) + 5, "the spare outlived the job\n" + report(outs)
    assert_tmp_clean(outs)
    assert s.returncode == RDZV_CLOSED, report(outs)
    assert "the rendezvous is closed: the job ended with exit code 0" in s.stderr, report(outs)


@pytest.mark.parametrize("nnodes,started", [("3", 1), ("3:3", 1), ("3", 2)], ids=["3-one-node", "3:3-one-node",
                                                                                     "3-two-nodes"])
def test_round_below_min_fails_with_121(hosts, tmp_path, nnodes, started):
    """MIN is 3 but only `started` nodes come: after join_timeout=3 every waiting node exits 121
    naming the nodes that came and how many are missing; no worker starts."""
    rig = hosts(started)
    ep = endpoint(rig)
    t0 = time.monotonic()
    procs = [start_node(rig, tmp_path, h, nnodes, "c10d", ep, join_timeout=3) for h in range(started)]
    outs = finish_all(procs, timeout=3 + SLACK + 10, since=t0)
    came = ", ".join(rig.host(h).addr for h in range(started))
    msg = (f"round 0 did not reach the minimum of 3 nodes within join_timeout (3 s): {started} node"
           f"{'s' if started > 1 else ''} came ({came}); {3 - started} missing")
    for o in outs:
        assert o.returncode == RDZV_FAILED, report(outs)
        assert 2.5 <= o.elapsed <= 3 + SLACK, report(outs)
        assert msg in o.stderr, f"no {msg!r}\n" + report(outs)
        assert o.stdout == "", report(outs)
    assert_tmp_clean(outs)


def test_group_rank_and_group_world_size_are_the_rounds(hosts, tmp_path):
    """As torchrun: GROUP_RANK is the node's rank in the round, GROUP_WORLD_SIZE the round's node
    count (2 here, below MAX=3)."""
    rig = hosts(2)
    ep = endpoint(rig)
    t0 = time.monotonic()
    procs = [start_node(rig, tmp_path, h, "2:3", "c10d", ep) for h in range(2)]
    outs = finish_all(procs, timeout=60, since=t0)
    for o in outs:
        assert o.returncode == 0, report(outs)
        node = node_map(o, 0)[o.addr][0]
        for _, f in records(o, "start", 4):
            assert (f["GROUP_RANK"], f["GROUP_WORLD_SIZE"]) == (str(node), "2"), report(outs)
