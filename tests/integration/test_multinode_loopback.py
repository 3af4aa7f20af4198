"""Several rankrun nodes on this host's loopback: addresses (IPv6, a host name), nodes of
different sizes, and restarts of every node together in a fresh key space. The behaviour over
real links (failures, lost nodes, cut cables) is in test_multinode.py, on namespace hosts."""
import os
import socket
import subprocess

import pytest

from harness import PYTHON, RANKRUN, SCRIPTS, have_torch, torch_only

# The tests marked torch_commit run again with torch 2.14 in make test (conftest.py).


def free_port(family=socket.AF_INET, addr="127.0.0.1"):
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind((addr, 0))
        return s.getsockname()[1]


def start(node_rank, nproc, args, script, env=None, tmp=None):
    full = dict(os.environ)
    full.pop("CUDA_VISIBLE_DEVICES", None)
    full["PYTHON_EXEC"] = PYTHON
    if tmp:
        tmp.mkdir(exist_ok=True)
        full["TMPDIR"] = str(tmp)
    full.update(env or {})
    return subprocess.Popen([str(RANKRUN), f"--node-rank={node_rank}", f"--nproc-per-node={nproc}", *args, str(script)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=full)


def finish_all(procs, timeout=60):
    results = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            pytest.fail("a node did not finish")
        results.append((p.returncode, out, err))
    return results


ENV_SCRIPT = SCRIPTS / "mn_fail.py"  # prints "ready rank=R local=L node=N", sleeps SLEEP


@pytest.mark.parametrize("addr,family", [("::1", socket.AF_INET6), ("localhost", socket.AF_INET)])
def test_nodes_of_different_sizes_over_ipv6_and_a_host_name(addr, family, tmp_path):
    port = free_port(family, "::1" if family == socket.AF_INET6 else "127.0.0.1")
    common = ["--nnodes=2", f"--master-addr={addr}", f"--master-port={port}", "--rdzv-conf=timeout=30"]
    procs = [start(0, 1, common, ENV_SCRIPT, {"SLEEP": "0"}, tmp_path / "n0"),
             start(1, 3, common, ENV_SCRIPT, {"SLEEP": "0"}, tmp_path / "n1")]
    results = finish_all(procs)
    shown = "::1" if family == socket.AF_INET6 else "127.0.0.1"
    for code, out, err in results:
        assert code == 0, err
        assert f"node 0 {shown}: rank 0" in err
        assert f"node 1 {shown}: ranks 1-3" in err
    out1 = results[1][1]
    for rank, local in ((1, 0), (2, 1), (3, 2)):
        assert f"[{shown}:{rank}] ready rank={rank} local={local} node=1" in out1
    # node 0 prints every rank of every node in the job summary
    assert "job summary (2 nodes, 4 ranks)" in results[0][2]
    assert list((tmp_path / "n0").iterdir()) == [] and list((tmp_path / "n1").iterdir()) == []


@pytest.mark.torch_commit
@torch_only
def test_a_restart_restarts_every_node_in_a_fresh_key_space(tmp_path):
    port = free_port()
    common = ["--nnodes=2", "--master-addr=127.0.0.1", f"--master-port={port}", "--max-restarts=1", "--term-timeout=5"]
    script = SCRIPTS / "restart_keyspace.py"
    procs = [start(0, 2, common, script, tmp=tmp_path / "n0"), start(1, 1, common, script, tmp=tmp_path / "n1")]
    results = finish_all(procs, timeout=120)
    for code, out, err in results:
        assert code == 0, out + err
        assert "restarting all workers" in err
    outs = results[0][1] + results[1][1]
    for rank in range(3):
        assert f"attempt 1 sees left-over-{rank} : False" in outs, outs


def test_a_hang_on_one_node_stops_every_node_with_124(tmp_path):
    port = free_port()
    common = ["--nnodes=2", "--master-addr=127.0.0.1", f"--master-port={port}", "--exit-timeout=2", "--term-timeout=2"]
    env = {"FAIL_RANK": "2", "FAIL_CODE": "0", "SLEEP": "120"}  # rank 2 (node 1) ends at once, the rest sleep
    procs = [start(0, 2, common, ENV_SCRIPT, env, tmp_path / "n0"), start(1, 2, common, ENV_SCRIPT, env, tmp_path / "n1")]
    (code0, _, err0), (code1, _, err1) = finish_all(procs, timeout=60)
    assert (code0, code1) == (124, 124), err0 + err1
    # node 1 found it, with global ranks; node 0 names where it was found
    assert "rank 3 is still running while rank 2 exited 0" in err1
    assert "a hang was detected on node 1" in err0


@torch_only
def test_peers_that_notice_the_failure_do_not_become_the_root_cause(tmp_path):
    # torchrun: every node exits 1 and the other nodes name their own "Connection reset by peer".
    port = free_port()
    common = ["--nnodes=2", "--master-addr=127.0.0.1", f"--master-port={port}", "--term-timeout=5"]
    env = {"FAIL_RANK": "2", "GLOO_SOCKET_IFNAME": "lo"}
    script = SCRIPTS / "mn_gloo_fail.py"
    procs = [start(0, 2, common, script, env, tmp_path / "n0"), start(1, 2, common, script, env, tmp_path / "n1")]
    results = finish_all(procs, timeout=120)
    for code, out, err in results:
        assert code == 3, err
        assert "Root cause: rank 2 (local" in err and "on node 1 (127.0.0.1)" in err, err
        assert "rank 2 fails on purpose" in err


@pytest.mark.parametrize("signalled", [0, 1])
def test_ctrl_c_during_the_rendezvous_ends_it_for_every_waiting_node(signalled, tmp_path):
    import signal
    import time
    port = free_port()
    common = ["--nnodes=3", "--master-addr=127.0.0.1", f"--master-port={port}", "--rdzv-conf=timeout=60"]
    procs = [start(n, 1, common, ENV_SCRIPT, {"SLEEP": "0"}, tmp_path / f"n{n}") for n in (0, 1)]  # node 2 never comes
    # Both nodes arrive and wait for node 2: each has its link's connection to the store open
    # (a fixed pause was not enough on a busy machine: node 1 came after node 0 had ended).
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        ss = subprocess.run(["ss", "-Htn", "state", "established", f"( dport = :{port} )"], capture_output=True, text=True)
        if len(ss.stdout.splitlines()) >= 2:
            break
        time.sleep(0.05)
    time.sleep(0.5)
    procs[signalled].send_signal(signal.SIGINT)
    results = finish_all(procs, timeout=15)
    other = 1 - signalled
    assert results[signalled][0] == 130, results[signalled][2]
    assert results[other][0] == 121, results[other][2]
    assert f"the rendezvous was aborted: rankrun on node {signalled} received SIGINT" in results[other][2]


def test_a_node_that_fails_its_start_checks_ends_the_job_everywhere_naming_itself(tmp_path):
    port = free_port()
    common = ["--nnodes=2", "--master-addr=127.0.0.1", f"--master-port={port}", "--rdzv-conf=timeout=60"]
    procs = [start(0, 1, common, ENV_SCRIPT, {"SLEEP": "0"}, tmp_path / "n0"),
             start(1, 1, common, ENV_SCRIPT, {"SLEEP": "0", "GLOO_SOCKET_IFNAME": "nosuchif0"}, tmp_path / "n1")]
    (code0, out0, err0), (code1, out1, err1) = finish_all(procs, timeout=30)
    assert code1 == 2, err1
    assert code0 == 121, err0
    for err in (err0, err1):
        assert "node 1 failed its checks: GLOO_SOCKET_IFNAME=nosuchif0: names no interface that is up" in err, err
    assert "ready rank" not in out0 + out1  # no worker started anywhere
