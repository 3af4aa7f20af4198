"""The store's connection limit per address, set on rankrun-store (--max-connections-per-address)
and on rankrun (--store-connections-per-address): nodes behind NAT reach the store as one
address, and need more than the default 1024. The refusal is logged once, naming the flag."""
import os
import re
import subprocess

import pytest

from harness import BUILD, PYTHON, SCRIPTS, run

STORE_BIN = BUILD / "rendezvous" / "rankrun-store"
OPENER = SCRIPTS / "open_store_connections.py"


def test_rankrun_store_takes_as_many_from_one_address_as_it_is_told():
    proc = subprocess.Popen([str(STORE_BIN), "--host", "127.0.0.1", "--port", "0", "--max-connections-per-address", "3"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("listening on "), (line, proc.stderr.read())
        port = line.rsplit(":", 1)[1].strip()
        opened = subprocess.run([PYTHON, str(OPENER), "127.0.0.1", port, "4"], capture_output=True, text=True, timeout=30)
        assert opened.stdout.splitlines() == ["connection 1: kept", "connection 2: kept", "connection 3: kept",
                                              "connection 4: closed"], opened
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, err
    err = out + err  # rankrun-store logs to standard output
    assert re.search(r"refusing connections from 127\.0\.0\.1: 3 open from that address \(the limit per address, "
                     r"--max-connections-per-address; nodes behind NAT share one address: raise it\)", err), err


@pytest.mark.parametrize("flag,value", [("--max-connections-per-address", v) for v in ("0", "-5", "1000001", "many")] +
                         [("--max-connections", v) for v in ("0", "-5", "10000001", "many")])
def test_rankrun_store_refuses_a_limit_that_is_none(flag, value):
    r = subprocess.run([str(STORE_BIN), "--port", "0", flag, value], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2, r
    assert flag in r.stderr and value in r.stderr, r


def test_rankrun_s_store_takes_its_limit_per_address_from_the_flag(tmp_path):
    # the worker itself opens three plain connections to the store rankrun hosts
    r = run(["--nproc-per-node", "1", "--store-connections-per-address", "2", OPENER, "3"], timeout=60)
    assert r.returncode == 0, r
    assert r.lines(0) == ["connection 1: kept", "connection 2: kept", "connection 3: closed"], r
    assert re.search(r"refusing connections from 127\.0\.0\.1: 2 open from that address \(the limit per address, "
                     r"--store-connections-per-address;", r.stderr), r
    # the default takes them all
    r = run(["--nproc-per-node", "1", OPENER, "3"], timeout=60)
    assert r.lines(0) == ["connection 1: kept", "connection 2: kept", "connection 3: kept"], r
    # and a value that is none is a usage error naming it
    r = run(["--nproc-per-node", "1", "--store-connections-per-address", "0", OPENER, "3"], timeout=60)
    assert r.returncode == 2, r
    assert "--store-connections-per-address=0 is not a number of connections" in r.stderr, r


def test_the_listen_backlog_is_as_deep_as_the_system_allows():
    # net.core.somaxconn is per network namespace: in a private one raised past asio's 4096, the
    # store's listening socket gets all of it (ss shows a listener's backlog as its Send-Q)
    script = f"""
set -e
ip link set lo up
sysctl -qw net.core.somaxconn=16384
{STORE_BIN} --host 127.0.0.1 --port 0 > "$1" &
store=$!
for i in $(seq 50); do grep -q listening "$1" && break; sleep 0.1; done
ss -Hltn
kill $store
wait $store
"""
    import tempfile
    with tempfile.NamedTemporaryFile("r") as out:
        r = subprocess.run(["unshare", "--net", "sh", "-c", script, "sh", out.name], capture_output=True, text=True,
                           timeout=30)
    if r.returncode != 0 and "unshare" in r.stderr:
        pytest.skip(f"no private network namespace here: {r.stderr.strip()}")
    assert r.returncode == 0, r
    listeners = [l.split() for l in r.stdout.splitlines() if l.startswith("LISTEN")]
    assert len(listeners) == 1 and listeners[0][2] == "16384", r.stdout


def test_check_says_the_listen_backlog():
    r = run(["--check", "--nproc-per-node", "2", OPENER, "1"], timeout=60)
    assert re.search(r"^\S+\s+listen backlog: net\.core\.somaxconn=\d+, net\.ipv4\.tcp_max_syn_backlog=\d+; the store here "
                     r"takes 6 connections at once", r.stdout, re.M), r
