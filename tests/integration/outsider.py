"""A host that is not one of the job's, on the job's network: its attacks on a store
(scripts/hostile_agent.py, the store's wire protocol by hand) run from a host of a netns rig,
and what the store's refusals look like (its replies, and the warnings node 0 logs)."""
import json
import re

from harness import PYTHON, SCRIPTS
from netns import report

HOSTILE = SCRIPTS / "hostile_agent.py"
# What the agents' attacks would leave in a node's output had the store taken them.
FORGED = ("forged by an outsider", "10.250.0.4-evil")
WORKER_REFUSED = re.compile(r"^rankrun: warning: store: refused a worker connection from (\S+): not one of the job's hosts",
                            re.M)
REFUSED = re.compile(r"^rankrun: warning: store: refused an agent connection from (\S+): (.*)$", re.M)


def attack(rig, host, store_addr, port, attacks, run_id="none"):
    """Each of `attacks` from rig host `host` against the store at store_addr:port;
    {name: (reply bytes, closed by the store)}."""
    r = rig.host(host).run([PYTHON, HOSTILE, store_addr, port, *attacks], env={"RUN_ID": run_id}, timeout=60)
    assert r.returncode == 0, r
    results = {}
    for line in r.stdout.splitlines():
        rec = json.loads(line)
        results[rec["attack"]] = (bytes.fromhex(rec["reply"]), rec["closed"])
    assert sorted(results) == sorted(attacks), r
    return results


def value(text):
    """A COMPARE_SET's reply as the store sends it: u64 length, then the bytes."""
    return len(text).to_bytes(8, "little") + text


def assert_nothing_given(results, outs, silent):
    """Every attack was closed by the store; those in `silent` got no byte back; none got a node
    record or "joined"."""
    for name, (reply, closed) in results.items():
        assert closed, f"{name}: the store kept the connection open (it answered {reply[:300]!r})\n" + report(outs)
    for name in silent:
        assert results[name][0] == b"", f"{name}: the store answered {results[name][0]!r}\n" + report(outs)
    for name, (reply, _) in results.items():
        assert b'"record":"node"' not in reply and b"joined" not in reply, f"{name}: {reply!r}\n" + report(outs)


def refused_lines(o):
    """[(address, why)] of the store's refused agent connections on this node's stderr."""
    return REFUSED.findall(o.stderr)
