"""Multi-node jobs, each node a network namespace of its own (netns.py): 3 hosts on a bridge,
`rankrun --nnodes=3 --node-rank=R --master-addr=<host 0> ...` on each, node 0 hosting the store.

Exit codes under test: 0 success; N the root-cause worker's code, on every node; 130 after
SIGINT on one node, on every node; 121 rendezvous failed; 122 a node was lost (the survivors);
123 this node lost the store host; 2 usage error (this node's own duplicate node rank).
Every test also checks, through the rig, that no process is left in any namespace at its end."""
import os
import re
import signal
import time
from pathlib import Path

import pytest

from harness import PYTHON, RANKRUN, SCRIPTS, has_flight_recorder, have_torch, pids_alive, torch_only, wait_for_pidfds
from netns import finish_all, hosts, report, snapshot  # noqa: F401  (hosts is the fixture)

# The tests marked torch_commit run again with torch 2.14 in make test (conftest.py).


PORT = 29500
NPROC = 2
NODE_TIMEOUT = 3
TERM_TIMEOUT = 2
SLACK = 10  # seconds allowed beyond a timeout under test (2 cores, 2 tests at once)

RDZV_FAILED, NODE_LOST, STORE_LOST, SIGINT_CODE, USAGE = 121, 122, 123, 130, 2
FAIL = SCRIPTS / "mn_fail.py"
ALLREDUCE = SCRIPTS / "mn_allreduce.py"
PREFIXED = re.compile(r"^\[(\d+\.\d+\.\d+\.\d+):(\d+)\] (.*)$")


# --- helpers ---------------------------------------------------------------------------------
def start_node(rig, tmp_path, host, node_rank, script, *, nnodes=3, extra=(), env=None,
               node_timeout=NODE_TIMEOUT, term_timeout=TERM_TIMEOUT, nsenter=False):
    """rankrun on host `host` as node `node_rank`. Each node gets a TMPDIR of its own, as on
    separate machines (the namespaces share the file system). nsenter=True starts it with
    `nsenter --net` rather than `ip netns exec`, so that it sees the cgroup2 mount and puts its
    job in a cgroup (under `ip netns exec` it cannot, and falls back to its process-tree walk)."""
    tmp = tmp_path / f"tmp-h{host}-n{node_rank}"
    tmp.mkdir(exist_ok=True)
    args = [RANKRUN, f"--nnodes={nnodes}", f"--node-rank={node_rank}", f"--master-addr={rig.host(0).addr}",
            f"--master-port={PORT}", f"--nproc-per-node={NPROC}", f"--node-timeout={node_timeout}",
            f"--term-timeout={term_timeout}", *extra, script]
    full_env = {"PYTHON_EXEC": PYTHON, "TMPDIR": str(tmp)}
    full_env.update(env or {})
    proc = rig.host(host).popen(args, env=full_env, nsenter=nsenter)
    proc.tmpdir = tmp
    return proc


def start_job(rig, tmp_path, script, nodes=((0, 0), (1, 1), (2, 2)), **kw):
    """[(host, node rank)] -> Procs, in that order."""
    return [start_node(rig, tmp_path, h, r, script, **kw) for h, r in nodes]


def wait_ready(procs, timeout=30):
    """Every worker of every node has printed its `ready` line."""
    deadline = time.monotonic() + timeout
    for p in procs:
        if not p.wait_for(r"\bready rank=", NPROC, timeout=max(0.0, deadline - time.monotonic())):
            now = time.monotonic()
            for q in procs:
                q.poll()
            pytest.fail(f"host {p.host.index}: its {NPROC} workers did not all print `ready` in {timeout}s\n"
                        + report([snapshot(q, now) for q in procs]))


def map_lines(rig, nnodes=3):
    return [f"node {n} {rig.host(n).addr}: ranks {n * NPROC}-{n * NPROC + NPROC - 1}" for n in range(nnodes)]


def assert_map(o, rig, outs):
    for line in map_lines(rig):
        assert line in o.stderr, f"host {o.host} does not print the node map line {line!r}\n" + report(outs)


def worker_lines(o, rank):
    """What global rank `rank` printed on this node's stdout, the `[addr:rank] ` prefix removed
    (the address must be this node's)."""
    got = []
    for line in o.stdout.splitlines():
        m = PREFIXED.match(line)
        if m and int(m.group(2)) == rank:
            assert m.group(1) == o.addr, f"rank {rank} on host {o.host} prefixed with {m.group(1)}: {line!r}"
            got.append(m.group(3))
    return got


def cgroup2_mounted():
    with open("/proc/self/mounts") as f:
        return any(l.split()[2] == "cgroup2" for l in f)


def job_cgroups(pids):
    """The rankrun job cgroups (cgroup2 directories) these processes are in."""
    with open("/proc/self/mounts") as f:
        mounts = [l.split()[1] for l in f if l.split()[2] == "cgroup2"]
    found = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cgroup") as f:
                m = re.search(r"^0::(/.*rankrun-[^/\n]+)$", f.read(), re.M)
        except OSError:
            continue
        if m and mounts:
            found.add(Path(mounts[0] + m.group(1)))
    return sorted(found)


def lines_with(text, *words):
    return [l for l in text.splitlines() if all(w.lower() in l.lower() for w in words)]


# --- the rig itself --------------------------------------------------------------------------
def test_rig_two_hosts_tcp_and_cut(hosts):
    """The rig alone: host 1 reaches host 0 over TCP, a cut at the switch blocks it, a plug
    restores it; nothing reaches outside; every process gets GLOO_SOCKET_IFNAME=eth0."""
    rig = hosts(2)
    a0 = rig.host(0).addr
    server = rig.host(0).popen([PYTHON, "-c", (
        "import socket\n"
        "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
        "s.bind(('0.0.0.0', 5000)); s.listen(); print('listening', flush=True)\n"
        "while True:\n"
        "    c, a = s.accept(); print('accepted', a[0], flush=True); c.close()\n")])
    assert server.wait_for("listening", timeout=10), server.stderr
    connect = ("import socket, sys\n"
               "try:\n"
               "    socket.create_connection((sys.argv[1], 5000), timeout=1); print('connected')\n"
               "except OSError as e:\n"
               "    print('failed', type(e).__name__, e); sys.exit(1)\n")
    r = rig.host(1).run([PYTHON, "-c", connect, a0], timeout=10)
    assert r.returncode == 0, r
    assert server.wait_for(rf"accepted {re.escape(rig.host(1).addr)}", timeout=5), server.stdout

    rig.cut(0)
    r = rig.host(1).run([PYTHON, "-c", connect, a0], timeout=10)
    assert r.returncode == 1 and "timed out" in r.stdout, r
    rig.plug(0)
    r = rig.host(1).run([PYTHON, "-c", connect, a0], timeout=10)
    assert r.returncode == 0, r

    r = rig.host(1).run([PYTHON, "-c", "import os; print(os.environ['GLOO_SOCKET_IFNAME'])"], timeout=10)
    assert r.stdout.strip() == "eth0", r
    r = rig.host(1).run(["ip", "route", "get", "8.8.8.8"], timeout=10)
    assert r.returncode != 0 and "unreachable" in r.stderr.lower(), r

    server.signal(signal.SIGKILL)
    assert server.wait(5) == -signal.SIGKILL
    assert rig.pids(0) == [] and rig.pids(1) == []


def test_rig_teardown_finds_and_kills_leftovers():
    """Teardown notices a process left in a namespace, kills it by pid, removes the namespaces."""
    import netns

    reason = netns.check_available()
    if reason:
        pytest.skip(reason)
    rig = netns.Rig(2)
    try:
        rig.up()
    except netns.RigUnavailable as e:
        pytest.skip(str(e))
    names = [rig.switch] + [h.ns for h in rig.hosts]
    try:
        assert set(names) <= set(netns.list_namespaces())
        sleeper = rig.host(1).popen(["sh", "-c", "trap '' TERM; sleep 300 & wait"])  # ignores SIGTERM
        deadline = time.monotonic() + 5
        while len(rig.pids(1)) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        left = rig.leftovers()
        assert list(left) == [rig.host(1).ns] and len(left[rig.host(1).ns]) == 2, left
    finally:
        stuck = rig.down()
    assert stuck == []
    assert sleeper.popen.returncode == -signal.SIGKILL
    assert not set(names) & set(netns.list_namespaces())
    assert rig.setup_s < 5 and rig.teardown_s < 5, (rig.setup_s, rig.teardown_s)


# --- the feature -----------------------------------------------------------------------------
@pytest.mark.torch_commit
@torch_only
def test_three_nodes_allreduce(hosts, tmp_path):
    rig = hosts(3)
    t0 = time.monotonic()
    procs = start_job(rig, tmp_path, ALLREDUCE)
    outs = finish_all(procs, timeout=120, since=t0)
    master = rig.host(0).addr
    for node, o in enumerate(outs):
        assert o.returncode == 0, report(outs)
        assert_map(o, rig, outs)
        for line in o.stdout.splitlines():
            assert PREFIXED.match(line), f"host {node}: an unprefixed stdout line {line!r}\n" + report(outs)
        for local in range(NPROC):
            rank = node * NPROC + local
            lines = worker_lines(o, rank)
            env = dict(l.split("=", 1) for l in lines if "=" in l and not l.startswith("sum="))
            assert env == {"RANK": str(rank), "LOCAL_RANK": str(local), "WORLD_SIZE": "6", "GROUP_RANK": str(node),
                           "GROUP_WORLD_SIZE": "3", "LOCAL_WORLD_SIZE": "2", "ROLE_RANK": str(rank),
                           "MASTER_ADDR": master, "MASTER_PORT": str(PORT)}, f"rank {rank}\n" + report(outs)
            assert "sum=15" in lines and "done" in lines, f"rank {rank}\n" + report(outs)


def test_worker_failure_is_the_root_cause_on_every_node(hosts, tmp_path):
    """Rank 4 (node 2, local 0) exits 3 while the others sleep: every node exits 3 and names it."""
    rig = hosts(3)
    trigger = tmp_path / "fail-now"
    procs = start_job(rig, tmp_path, FAIL, env={"FAIL_RANK": "4", "FAIL_FILE": str(trigger)})
    wait_ready(procs)
    t0 = time.monotonic()
    trigger.touch()
    outs = finish_all(procs, timeout=40, since=t0)
    for node, o in enumerate(outs):
        assert o.returncode == 3, report(outs)
        assert o.elapsed < 20, report(outs)
        assert "Root cause: rank 4" in o.stderr, report(outs)
        assert lines_with(o.stderr, "node 2"), report(outs)
        assert_map(o, rig, outs)
        for local in range(NPROC):
            rank = node * NPROC + local
            assert f"ready rank={rank} local={local} node={node}" in worker_lines(o, rank), report(outs)


@torch_only
@pytest.mark.parametrize("stopped_node", [1, 0], ids=["failing-node-stopped", "store-host-stopped"])
def test_a_delayed_node_does_not_make_a_victim_the_root_cause(hosts, tmp_path, stopped_node):
    """gloo across 2 nodes: rank 3 (node 1) raises, ranks 0-2 die of the broken all_reduce. One
    node's rankrun is stopped (SIGSTOP) while all of it happens: the node of the failure (its
    victim rank 2 has the lower pid), or node 0, which hosts the store and whose ranks are all
    victims. Each run, every node names rank 3."""
    rig = hosts(2)
    ready = tmp_path / "ready"
    ready.mkdir()
    env = {"READY_DIR": str(ready), "FAIL_RANK": "3"}
    procs = [start_node(rig, tmp_path, h, h, SCRIPTS / "delayed_failure.py", nnodes=2, env=env, node_timeout=15)
             for h in (0, 1)]
    paths = [ready / f"ready.{r}" for r in range(2 * NPROC)]
    t0 = time.monotonic()
    deadline = t0 + 120
    while not all(p.exists() for p in paths):
        if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
            pytest.fail("the ranks did not all get ready\n" + report(finish_all(procs, timeout=30, since=t0)))
        time.sleep(0.05)
    pids = [int(p.read_text()) for p in paths]
    for node, proc in enumerate(procs):
        wait_for_pidfds(proc.pid, pids[node * NPROC:(node + 1) * NPROC])
    t0 = time.monotonic()
    os.kill(procs[stopped_node].pid, signal.SIGSTOP)
    try:
        (ready / "go").touch()
        deadline = time.monotonic() + 60
        while pids_alive(pids) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not pids_alive(pids), f"ranks still running: {pids_alive(pids)}"
    finally:
        os.kill(procs[stopped_node].pid, signal.SIGCONT)
    outs = finish_all(procs, timeout=60, since=t0)
    for o in outs:
        assert o.returncode == 1, report(outs)
        # Its own time (rank 3 recorded its failure), sent with the notice to the other node.
        assert re.search(r"^Root cause: rank 3 .* exited with code 1 after [\d.]+s$", o.stderr, re.M), report(outs)
        assert "ValueError: rank 3 fails on purpose" in o.stderr, report(outs)


@pytest.mark.parametrize("wrapper", ["ip-netns-exec", "nsenter"])
def test_killed_launcher_is_a_lost_node(hosts, tmp_path, wrapper):
    """SIGKILL node 1's rankrun once every worker runs: nodes 0 and 2 exit 122 naming node 1
    (ranks 2-3) lost; node 1's workers are gone (its guardian: by cgroup under nsenter, by its
    job id under `ip netns exec`, which hides the cgroup mount)."""
    rig = hosts(3)
    procs = start_job(rig, tmp_path, FAIL, nsenter=wrapper == "nsenter")
    wait_ready(procs)
    cgroups = job_cgroups(rig.pids(0) + rig.pids(1) + rig.pids(2))
    # a job cgroup per node where the cgroup2 mount is seen (nsenter), none under `ip netns exec`
    assert len(cgroups) == (3 if wrapper == "nsenter" and cgroup2_mounted() else 0), cgroups
    t0 = time.monotonic()
    procs[1].signal(signal.SIGKILL)  # `ip netns exec` and nsenter exec: this pid is rankrun itself
    outs = finish_all(procs, timeout=NODE_TIMEOUT + SLACK + 10, since=t0)
    assert outs[1].returncode == -signal.SIGKILL, report(outs)
    for o in (outs[0], outs[2]):
        assert o.returncode == NODE_LOST, report(outs)
        assert o.elapsed <= NODE_TIMEOUT + SLACK, report(outs)
        assert lines_with(o.stderr, "node 1", "lost"), report(outs)
        not_map = "\n".join(l for l in o.stderr.splitlines() if l not in map_lines(rig))
        assert "2-3" in not_map, report(outs)
        assert_map(o, rig, outs)
    left = rig.wait_empty(1, timeout=10)
    assert left == [], f"node 1's processes outlive its rankrun: {left}\n" + report(outs)
    assert list(procs[1].tmpdir.iterdir()) == [], "node 1's run directory is left behind"
    left_cg = [d for d in cgroups if d.exists()]
    for d in left_cg:
        try:
            d.rmdir()
        except OSError:
            pass
    assert left_cg == [], f"job cgroups left behind: {left_cg}"


def test_cable_cut_loses_the_node_and_the_node_loses_the_store(hosts, tmp_path):
    """Pull node 2's cable once running: nodes 0 and 1 exit 122 (node 2 lost), node 2 exits 123
    (it lost the store host), all within the node timeout and some slack."""
    rig = hosts(3)
    procs = start_job(rig, tmp_path, FAIL)
    wait_ready(procs)
    t0 = time.monotonic()
    rig.cut(2)
    outs = finish_all(procs, timeout=NODE_TIMEOUT + SLACK + 10, since=t0)
    assert [o.returncode for o in outs] == [NODE_LOST, NODE_LOST, STORE_LOST], report(outs)
    for o in outs:
        assert o.elapsed <= NODE_TIMEOUT + SLACK, report(outs)
    for o in outs[:2]:
        assert lines_with(o.stderr, "node 2", "lost"), report(outs)


def test_a_node_whose_own_rank_failed_keeps_its_root_cause_when_the_store_host_goes(hosts, tmp_path):
    """Node 0's cable is pulled, then rank 2 (node 1) exits 7 on its own, with no peer lost: its
    failure goes out as the root cause and never comes back. Node 1 exits 7, its report marks
    rank 2 as the root cause and says the store host was lost after; node 2, which had nothing
    of its own, exits 123; node 0 loses both (122)."""
    rig = hosts(3)
    fail_file = tmp_path / "fail"
    procs = start_job(rig, tmp_path, FAIL, env={"FAIL_RANK": "2", "FAIL_FILE": str(fail_file), "FAIL_CODE": "7"})
    wait_ready(procs)
    t0 = time.monotonic()
    rig.cut(0)
    fail_file.touch()
    outs = finish_all(procs, timeout=NODE_TIMEOUT + SLACK + 10, since=t0)
    assert [o.returncode for o in outs] == [NODE_LOST, 7, STORE_LOST], report(outs)
    node1 = outs[1].stderr
    assert "rank 2 on this node failed first (the root cause here): exiting with its code 7" in node1, report(outs)
    assert re.search(r"FAILED on node 1 \(\S+\), then lost the store host", node1), report(outs)
    assert lines_with(node1, "<- root cause"), report(outs)
    assert "lost the store host" in outs[2].stderr and "root cause here" not in outs[2].stderr, report(outs)


def test_missing_node_times_out(hosts, tmp_path):
    """Only nodes 0 and 1 of 3 start: a progress line names what is missing, both exit 121 after
    --rdzv-conf timeout=3 and name node 2."""
    rig = hosts(2)
    t0 = time.monotonic()
    procs = start_job(rig, tmp_path, FAIL, nodes=((0, 0), (1, 1)), extra=["--rdzv-conf", "timeout=3"])
    outs = finish_all(procs, timeout=3 + SLACK + 10, since=t0)
    for o in outs:
        assert o.returncode == RDZV_FAILED, report(outs)
        assert 2.5 <= o.elapsed <= 3 + SLACK, report(outs)
        assert lines_with(o.stderr, "waiting for", "missing"), report(outs)
        # the failure itself, not only the progress line, names what was missing
        assert [l for l in lines_with(o.stderr, "node 2") if "waiting for" not in l], report(outs)
        assert "ready rank=" not in o.stdout, report(outs)


def test_unreachable_endpoint_is_named_at_once(hosts, tmp_path):
    """Only node 1 starts; nothing listens on host 0: within a few seconds stderr names
    host0:29500 and `refused`, and rankrun exits 121 after --rdzv-conf timeout=4."""
    rig = hosts(2)
    t0 = time.monotonic()
    (p,) = start_job(rig, tmp_path, FAIL, nodes=((1, 1),), extra=["--rdzv-conf", "timeout=4"])
    endpoint = f"{rig.host(0).addr}:{PORT}"
    ep = re.escape(endpoint)
    named = p.wait_for(rf"(?i){ep}.*refused|refused.*{ep}", timeout=3.5, stream="err") or bool(
        lines_with(p.stderr, endpoint) and lines_with(p.stderr, "refused"))
    seen_at = time.monotonic() - t0
    (o,) = finish_all([p], timeout=4 + SLACK + 10, since=t0)
    assert named, f"no `{endpoint} ... refused` on stderr within 3.5 s\n" + report([o])
    assert seen_at < 3.5 and p.ended - t0 > seen_at, report([o])
    assert o.returncode == RDZV_FAILED, report([o])
    assert 3.5 <= o.elapsed <= 4 + SLACK, report([o])


def test_duplicate_node_rank(hosts, tmp_path):
    """Nodes 0 and 1 start, then host 2 also claims node rank 1: it exits 2 naming both hosts;
    the others exit 121 (or 2) naming the duplicate."""
    rig = hosts(3)
    t0 = time.monotonic()
    first = start_job(rig, tmp_path, FAIL, nodes=((0, 0), (1, 1)), extra=["--rdzv-conf", "timeout=5"])
    deadline = time.monotonic() + 2  # both have reached the store (best effort: go on either way)
    for p in first:
        p.wait_for("waiting for", timeout=max(0.0, deadline - time.monotonic()), stream="err")
    dup = start_node(rig, tmp_path, 2, 1, FAIL, extra=["--rdzv-conf", "timeout=5"])
    outs = finish_all(first + [dup], timeout=5 + SLACK + 10, since=t0)
    a1, a2 = rig.host(1).addr, rig.host(2).addr
    d = outs[2]
    assert d.returncode == USAGE, report(outs)
    assert a1 in d.stderr and a2 in d.stderr, report(outs)
    for o in outs[:2]:
        assert o.returncode in (RDZV_FAILED, USAGE), report(outs)
        assert a2 in o.stderr, report(outs)
    for o in outs:
        assert o.elapsed <= 5 + SLACK, report(outs)
        assert "ready rank=" not in o.stdout, report(outs)


def test_ctrl_c_on_one_node_stops_every_node(hosts, tmp_path):
    """SIGINT to node 1's rankrun once running: every node exits 130."""
    rig = hosts(3)
    procs = start_job(rig, tmp_path, FAIL)
    wait_ready(procs)
    t0 = time.monotonic()
    procs[1].signal(signal.SIGINT)
    outs = finish_all(procs, timeout=TERM_TIMEOUT + SLACK + 10, since=t0)
    for o in outs:
        assert o.returncode == SIGINT_CODE, report(outs)
        assert o.elapsed <= TERM_TIMEOUT + SLACK, report(outs)


def test_static_rdzv_endpoint_is_node_0s_store(hosts, tmp_path):
    """As torchrun reads it for the static backend: `--rdzv-endpoint=HOST:PORT --rdzv-id=101` and
    no --master-addr/--master-port; the workers get MASTER_ADDR/MASTER_PORT from it."""
    rig = hosts(2)
    t0 = time.monotonic()
    procs = []
    for node in range(2):
        tmp = tmp_path / f"tmp-h{node}"
        tmp.mkdir()
        args = [RANKRUN, "--nnodes=2", f"--node-rank={node}", f"--rdzv-endpoint={rig.host(0).addr}:29511", "--rdzv-id=101",
                f"--nproc-per-node={NPROC}", ALLREDUCE]
        p = rig.host(node).popen(args, env={"PYTHON_EXEC": PYTHON, "TMPDIR": str(tmp)})
        p.tmpdir = tmp
        procs.append(p)
    outs = finish_all(procs, timeout=120, since=t0)
    for node, o in enumerate(outs):
        assert o.returncode == 0, report(outs)
        for local in range(NPROC):
            lines = worker_lines(o, node * NPROC + local)
            assert f"MASTER_ADDR={rig.host(0).addr}" in lines and "MASTER_PORT=29511" in lines, report(outs)
            assert "sum=6" in lines, report(outs)


def test_a_port_that_is_not_a_store(hosts, tmp_path):
    """A web server holds node 0's --master-port. Node 0 says the port is taken and what to do
    in a multi-node job (another free port for every node; not --master-port=0, which a
    multi-node job refuses); `rankrun --check` on node 1 does not call the HTTP server a
    reachable store; node 1 exits 121 at once naming what answers there, instead of retrying
    for the rendezvous timeout."""
    rig = hosts(2)
    # A web server's answer to bytes it cannot parse, at once, to every connection.
    server = rig.host(0).popen([PYTHON, "-c", f"""
import socket
s = socket.create_server(("{rig.host(0).addr}", {PORT}))
while True:
    c, _ = s.accept()
    c.sendall(b"HTTP/1.1 400 Bad Request\\r\\nContent-Length: 0\\r\\n\\r\\n")
    c.close()
"""])
    try:
        assert rig.host(1).run([PYTHON, "-c", f"""
import socket, time
for _ in range(100):
    try:
        socket.create_connection(("{rig.host(0).addr}", {PORT}), 1).close(); break
    except OSError:
        time.sleep(0.1)
"""], timeout=20).returncode == 0
        t0 = time.monotonic()
        procs = start_job(rig, tmp_path, FAIL, nodes=((0, 0), (1, 1)), nnodes=2)
        outs = finish_all(procs, timeout=30, since=t0)
        # After the job: its exit time is its own, not the check's too.
        check = rig.host(1).run([RANKRUN, "--check", "--nnodes=2", "--node-rank=1", f"--master-addr={rig.host(0).addr}",
                                 f"--master-port={PORT}", str(FAIL)], env={"PYTHON_EXEC": PYTHON}, timeout=60)
        assert outs[0].returncode != 0, report(outs)
        assert "address in use by pid" in outs[0].stderr and "give every node another free port" in outs[0].stderr, \
            report(outs)
        assert "--master-port=0" not in outs[0].stderr, report(outs)
        assert outs[1].returncode == RDZV_FAILED, report(outs)
        # "At once": ~0.4 s here; the bound is far below the 900 s of retries it replaces.
        assert outs[1].elapsed < 20, report(outs)
        assert "is not a store" in outs[1].stderr and "'HTTP" in outs[1].stderr, report(outs)
        assert check.returncode != 0 and "is not a store" in check.stdout, check
    finally:
        server.signal(signal.SIGTERM)
        server.finish(timeout=10)


def verdict_lines(o):
    return [l for l in o.stderr.splitlines() if l.startswith("rankrun: verdict: ")]


@pytest.mark.torch_commit
@torch_only
def test_node_0_decides_a_hang_for_the_whole_job_with_one_verdict_on_every_node(hosts, tmp_path):
    """Rank 0 in barrier, ranks 1-5 in all_reduce, on three nodes: node 0 sees every rank through
    the nodes' progress and calls the hang within --progress-timeout and a few looks; every node
    prints the same verdict, naming global ranks."""
    rig = hosts(3)
    t0 = time.monotonic()
    procs = start_job(rig, tmp_path, SCRIPTS / "mn_hang.py", extra=("--progress-timeout=6",))
    outs = finish_all(procs, timeout=90, since=t0)
    # each rank prints "ready" just before it blocks; start-up (torch's import, the gloo group) is
    # left out: with 2.14 on 2 busy cores it alone can take 15 s
    ready = [t for o in outs for t, line in o.timed_out if "ready rank=" in line]
    assert len(ready) == 6, report(outs)
    for o in outs:
        assert o.returncode == 124, report(outs)
        # found within the timeout and a few looks after the last rank blocked
        assert o.elapsed - max(ready) < 6 + 8 + SLACK, report(outs)
    assert "hang detected across the job" in outs[0].stderr, report(outs)
    verdicts = [verdict_lines(o) for o in outs]
    for v in verdicts:
        assert len(v) == 1 and v == verdicts[0], report(outs)
    v = verdicts[0][0]
    assert re.search(r"\brank 0 in barrier\b", v) and re.search(r"\branks 1-5 in all_reduce\b", v), v
    if has_flight_recorder():
        # the other nodes' ranks' collectives come with their progress: matched with node 0's dumps
        assert "Flight recorder: at collective #1 of the default group the ranks run different collectives: " \
               "rank 0 barrier, ranks 1-5 all_reduce. Look at rank 0 first." in v, v
    # every node kept its own ranks' stacks before any rank was stopped (the evidence window)
    for node, o in enumerate(outs):
        for rank in (2 * node, 2 * node + 1):
            assert re.search(rf"stack of rank {rank} \(pid \d+\):", o.stderr), f"rank {rank}\n" + report(outs)
        if node > 0:
            assert re.search(rf"^  rank {2 * node}: running, in all_reduce", o.stderr, re.M), report(outs)
    # node 0's lines name every rank of every node, the others' with their node
    for rank in range(6):
        node = rank // NPROC
        label = rf"  rank {rank}: " if node == 0 else rf"  rank {rank} \(node {node}\): "
        assert re.search(rf"^{label}running, in (barrier|all_reduce)", outs[0].stderr, re.M), f"rank {rank}\n" + report(outs)


@torch_only
@pytest.mark.slow
def test_a_hang_across_nodes_is_found_with_no_flag_at_the_one_node_default(hosts, tmp_path):
    """No hang flag at all: the default --progress-timeout (180 s) holds across nodes too, where it
    used to be --straggler-timeout's 30 minutes."""
    rig = hosts(3)
    t0 = time.monotonic()
    procs = start_job(rig, tmp_path, SCRIPTS / "mn_hang.py")
    outs = finish_all(procs, timeout=300, since=t0)
    for o in outs:
        assert o.returncode == 124, report(outs)
        assert 175 < o.elapsed < 180 + 8 + 3 * SLACK, report(outs)
    verdicts = [verdict_lines(o) for o in outs]
    assert all(len(v) == 1 and v == verdicts[0] for v in verdicts), report(outs)


@torch_only
def test_a_rank_working_on_another_node_is_a_straggler_not_a_hang(hosts, tmp_path):
    """The last rank (node 2) works 15 s outside any collective while ranks 0-4 wait in
    all_reduce, under --progress-timeout=5: node 0 sees that rank move, names it as a straggler,
    and the job finishes. (Each node alone would see only ranks waiting.)"""
    rig = hosts(3)
    t0 = time.monotonic()
    procs = start_job(rig, tmp_path, SCRIPTS / "mn_straggler.py", extra=("--progress-timeout=5",))
    outs = finish_all(procs, timeout=120, since=t0)
    for o in outs:
        assert o.returncode == 0, report(outs)
        assert "HANG" not in o.stderr, report(outs)
    assert re.search(r"^rankrun: warning: straggler: rank 5 is outside the collectives at mn_straggler\.py:\d+ in "
                     r"\S+ \(working\) while ranks 0-4 wait in all_reduce", outs[0].stderr, re.M), \
        report(outs)


@torch_only
def test_a_hang_across_nodes_is_reported_with_every_node_s_ranks(hosts, tmp_path):
    """Rank 0 in barrier, ranks 1-5 in all_reduce, on three nodes: the job ends 124 on every node,
    and node 0's summary says where each rank of every node was."""
    rig = hosts(3)
    t0 = time.monotonic()
    procs = start_job(rig, tmp_path, SCRIPTS / "mn_hang.py", extra=("--progress-timeout=8",))
    outs = finish_all(procs, timeout=90, since=t0)
    for o in outs:
        assert o.returncode == 124, report(outs)
    summary = outs[0].stderr.split("job summary")[-1]
    assert re.search(r"rank 0 \(local 0, pid \d+\): .*; was in barrier at mn_hang\.py:\d+ in <module>, not moving for \d+s",
                     summary), report(outs)
    for rank in range(1, 6):
        assert re.search(rf"rank {rank} \(local {rank % NPROC}, pid \d+\): .*; was in all_reduce at mn_hang\.py:\d+ in <module>",
                         summary), f"rank {rank}\n" + report(outs)
    # A node whose own ranks were not the first found hung still says where they were.
    detected = [o for o in outs if "rankrun: HANG:" in o.stderr]
    assert detected, report(outs)
    for o in outs:
        assert "rankrun: HANG:" in o.stderr or "this node's ranks:" in o.stderr, report(outs)
