"""What the elastic tests (test_elastic.py over c10d, test_elastic_etcd.py over etcd) read
from the nodes of a job on namespace hosts: the workers' prefixed records (scripts/
elastic_train.py), the round's node map, when a line came; and waiting for lines on every node."""
import re
import time

import pytest

from netns import report, snapshot

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
