"""What the elastic tests (test_elastic.py over c10d, test_elastic_etcd.py over etcd) share: the
command every node runs (start_node), what they read from the nodes of a job on namespace hosts
(the workers' prefixed records of scripts/elastic_train.py, the round's node map, when a line
came), what a round must have been (check_round), and waiting for lines on every node."""
import ipaddress
import re
import time

import pytest

from harness import PYTHON, RANKRUN, SCRIPTS
from netns import report, snapshot

NPROC = 2
NODE_TIMEOUT = 3
LAST_CALL = 1
TERM_TIMEOUT = 2
SLACK = 10  # seconds allowed beyond a timeout under test (2 cores, 2 tests at once)
RDZV_CLOSED, RDZV_FAILED, RDZV_LOST = 119, 121, 123
JOB = "job1"
TRAIN = SCRIPTS / "elastic_train.py"
STORE_SUFFIX = " (this node hosts the workers' store)"

PREFIXED = re.compile(r"^\[(\d+\.\d+\.\d+\.\d+):(\d+)\] (\S+) ?(.*)$")
MAP_LINE = re.compile(r"^rankrun: node (\d+) (\S+): ranks (\d+)-(\d+)$")


def now_report(procs, since):
    for p in procs:
        p.poll()
    return report([snapshot(p, since) for p in procs])


def wait_all(procs, pattern, count, timeout, since, stream="out"):
    """Every proc prints `count` lines matching pattern within `timeout` (all together)."""
    deadline = time.monotonic() + timeout
    for p in procs:
        if not p.wait_for(pattern, count, timeout=max(0.0, deadline - time.monotonic()), stream=stream):
            pytest.fail(f"host {p.host.index}: not {count} line(s) matching {pattern!r} on std{stream} "
                        f"in {timeout}s\n" + now_report(procs, since))


def worker_records(o):
    """[(rank in the prefix, kind, {key: value})] of this node's stdout: `start K=V...`, `sum=N ...`,
    `done ...`; the prefix's address must be this node's."""
    recs = []
    for line in o.stdout.splitlines():
        m = PREFIXED.match(line)
        assert m, f"host {o.host}: an unprefixed stdout line {line!r}"
        assert m.group(1) == o.addr, f"host {o.host}: prefixed with {m.group(1)}: {line!r}"
        kind, rest = m.group(3), m.group(4)
        fields = dict(f.split("=", 1) for f in rest.split() if "=" in f)
        if kind.startswith("sum="):
            fields["sum"] = kind.split("=", 1)[1]
            kind = "sum"
        recs.append((int(m.group(2)), kind, fields))
    return recs


def records(o, kind, world):
    return [(r, f) for r, k, f in worker_records(o) if k == kind and f.get("WORLD_SIZE") == str(world)]


def node_map(o, round_):
    """{address: (node rank, first rank, last rank)} printed under `round R: ...` on stderr."""
    lines = o.stderr.splitlines()
    head = [i for i, l in enumerate(lines) if re.match(rf"^rankrun: round {round_}: \d+ nodes?, world size", l)]
    assert len(head) == 1, f"host {o.host}: {len(head)} headers for round {round_}\n{o.stderr}"
    found = {}
    for l in lines[head[0] + 1:]:
        m = MAP_LINE.match(l)
        if not m:
            break
        found[m.group(2)] = (int(m.group(1)), int(m.group(3)), int(m.group(4)))
    return found


def line_time(o, pattern):
    """Seconds (since the `since` of finish_all) at which the first stderr line matching pattern
    arrived, or None."""
    rx = re.compile(pattern)
    return next((t for t, l in o.timed_err if rx.search(l)), None)


def assert_summary(o, rounds, nodes, outs, nproc=2):
    """The coordinator's final output (the store host's with c10d): the rounds and the job
    summary."""
    assert "rankrun: rounds:" in o.stderr, report(outs)
    for r, (n, w) in enumerate(rounds):
        assert f"rankrun:   round {r}: {n} nodes (world {w})" in o.stderr, report(outs)
    assert f"rankrun: job summary ({nodes} nodes, {nodes * nproc} ranks):" in o.stderr, report(outs)
    assert "rankrun: job exit code 0" in o.stderr, report(outs)


def assert_tmp_clean(outs):
    for o in outs:
        left = list(o.tmpdir.iterdir())
        assert left == [], f"host {o.host} left {left} in its TMPDIR"


def start_node(rig, tmp_path, host, nnodes, backend, endpoint, script_args=("0",), *, join_timeout=20, extra=(),
               env=None, script=TRAIN, node_timeout=NODE_TIMEOUT, conf=""):
    """The same elastic command on host `host`: --rdzv-backend=`backend` (c10d or etcd) at
    `endpoint`, --rdzv-id=job1, `conf` after the last call and join timeouts in --rdzv-conf. Each
    node gets a TMPDIR of its own, as on separate machines (the namespaces share the file system)."""
    tmp = tmp_path / f"tmp-h{host}"
    tmp.mkdir(exist_ok=True)
    args = [RANKRUN, f"--nnodes={nnodes}", f"--nproc-per-node={NPROC}", f"--rdzv-backend={backend}",
            f"--rdzv-endpoint={endpoint}", f"--rdzv-id={JOB}",
            f"--rdzv-conf=last_call_timeout={LAST_CALL},join_timeout={join_timeout}{',' + conf if conf else ''}",
            f"--node-timeout={node_timeout}", f"--term-timeout={TERM_TIMEOUT}", *extra, script, *script_args]
    full_env = {"PYTHON_EXEC": PYTHON, "TMPDIR": str(tmp), "OMP_NUM_THREADS": "1"}
    full_env.update(env or {})
    proc = rig.host(host).popen(args, env=full_env)
    proc.tmpdir = tmp
    return proc


def round_header(o, round_):
    """The `rankrun: round R: ...` line on this node's stderr (exactly one)."""
    head = [l for l in o.stderr.splitlines() if re.match(rf"^rankrun: round {round_}: \d+ nodes?, world size", l)]
    assert len(head) == 1, f"host {o.host}: {len(head)} headers for round {round_}\n{o.stderr}"
    return head[0]


def expected_ranks(addrs, before=None):
    """{address: node rank} as the rounds assign them: a node keeps its node rank of the round
    before (`before`: {address: rank}) when it is below the round's size and not taken (lowest
    first); the others take the free ranks in natural address order."""
    before = before or {}
    n = len(addrs)
    ranks = {}
    for a in sorted(addrs, key=lambda a: (before.get(a, n), ipaddress.ip_address(a))):
        if before.get(a, n) < n and before[a] not in ranks.values():
            ranks[a] = before[a]
    free = iter(r for r in range(n) if r not in ranks.values())
    for a in sorted((a for a in addrs if a not in ranks), key=ipaddress.ip_address):
        ranks[a] = next(free)
    return ranks


def check_round(outs, rig, round_, members, world, sum_expected=True, done=True, *, store=None, before=None):
    """Every node in `outs` ran round `round_` with exactly the hosts `members`: they print the same
    node map (node ranks 0.., NPROC ranks each); each node's NPROC workers started with that
    round's RANK/GROUP_RANK/GROUP_WORLD_SIZE/WORLD_SIZE/LOCAL_*/ROLE_* and TORCHELASTIC_RUN_ID;
    every rank 0..world-1 started once; the all_reduce summed to the world size; the workers
    printed `done`. Where the workers' store is:

    - `store` "HOST:PORT" (c10d: the endpoint, whose host hosts the store): every worker's
      MASTER_ADDR and MASTER_PORT are it; the node ranks may be in any order.
    - no `store` (etcd): node rank 0 of the round hosts it: the node ranks are expected_ranks' (kept
      from the round `before` ({address: rank}) where they can be, else natural address order);
      only node rank 0's round header says it hosts the workers' store; every worker's
      MASTER_ADDR is node rank 0's address, and one MASTER_PORT is every worker's.

    Returns {address: node rank}."""
    assert world == NPROC * len(members)
    maps = [node_map(o, round_) for o in outs]
    addrs = sorted(rig.host(h).addr for h in members)
    ranks = {a: v[0] for a, v in maps[0].items()} if store else expected_ranks(addrs, before)
    for o, m in zip(outs, maps):
        assert sorted(m) == addrs, f"host {o.host}: round {round_} map {m}\n" + report(outs)
        assert m == maps[0], f"hosts disagree on the round {round_} map\n" + report(outs)
        assert sorted(v[0] for v in m.values()) == list(range(len(members))), report(outs)
        assert {a: v[0] for a, v in m.items()} == ranks, \
            f"round {round_}: node ranks {m}, expected {ranks}\n" + report(outs)
        for node, first, last in m.values():
            assert (first, last) == (node * NPROC, node * NPROC + NPROC - 1), report(outs)
    master_addr = next(a for a, r in ranks.items() if r == 0)
    ports = set()
    seen = []
    for o in outs:
        node, first, last = maps[0][o.addr]
        if not store:
            header = round_header(o, round_)
            assert header == f"rankrun: round {round_}: {len(members)} nodes, world size {world}" + \
                (STORE_SUFFIX if node == 0 else ""), f"host {o.host} (node {node}): {header!r}\n" + report(outs)
        starts = records(o, "start", world)
        assert sorted(r for r, _ in starts) == list(range(first, last + 1)), \
            f"host {o.host}: round {round_} workers\n" + report(outs)
        for r, f in starts:
            assert f["RANK"] == str(r) and f["LOCAL_RANK"] == str(r - first), report(outs)
            assert f["LOCAL_WORLD_SIZE"] == str(NPROC) and f["ROLE_WORLD_SIZE"] == str(world), report(outs)
            assert f["ROLE_RANK"] == str(r), report(outs)
            assert (f["GROUP_RANK"], f["GROUP_WORLD_SIZE"]) == (str(node), str(len(members))), report(outs)
            assert f["TORCHELASTIC_RUN_ID"] == JOB, report(outs)
            if store:
                assert f"{f['MASTER_ADDR']}:{f['MASTER_PORT']}" == store, report(outs)
            else:
                assert f["MASTER_ADDR"] == master_addr, \
                    f"host {o.host}: MASTER_ADDR {f['MASTER_ADDR']}, node rank 0 is {master_addr}\n" + report(outs)
            ports.add(f["MASTER_PORT"])
        seen += [r for r, _ in starts]
        if sum_expected:
            sums = records(o, "sum", world)
            assert sorted(r for r, _ in sums) == list(range(first, last + 1)), report(outs)
            assert all(f["sum"] == str(world) for _, f in sums), f"all_reduce != {world}\n" + report(outs)
        if done:
            assert sorted(r for r, _ in records(o, "done", world)) == list(range(first, last + 1)), report(outs)
    assert sorted(seen) == list(range(world)), f"ranks of round {round_}: {sorted(seen)}\n" + report(outs)
    assert len(ports) == 1, f"round {round_}: the workers got MASTER_PORTs {ports}\n" + report(outs)
    port = ports.pop()
    assert port.isdigit() and 0 < int(port) < 65536, report(outs)
    return ranks
