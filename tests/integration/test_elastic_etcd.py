"""Elastic rendezvous in etcd (--rdzv-backend=etcd) on network-namespace hosts (netns.py), with a
real etcd (Debian's /usr/bin/etcd, v3 API) and real gloo workers (scripts/elastic_train.py:
all_reduce of a 1, so the sum is the world size). Every node runs the same command:

    rankrun --nnodes=MIN:MAX --nproc-per-node=2 --rdzv-backend=etcd --rdzv-endpoint=<etcd host>:2379
            --rdzv-id=job1 --rdzv-conf=last_call_timeout=1,join_timeout=20 --node-timeout=3 ...

etcd runs in a host of its own (the rig's last one), which runs no rankrun, so that stopping etcd
touches no node. No node hosts the rendezvous: the rankruns elect a coordinator in etcd (the key
/rankrun/job1/coordinator, on the winner's lease, names "<hostname> pid <pid>"); node rank 0 of
each round hosts the workers' store (MASTER_ADDR/MASTER_PORT, a kernel-chosen port). A node
whose etcd lease lapses is lost and the survivors restart in the next round (no --max-restarts
spent); a node beyond MAX is a spare and exits 119 when the job ends; etcd lost mid-job: 123;
etcd unreachable at start: 121 after join_timeout.

Over https with etcd's users (the `etcd_tls_hosts` fixture): etcd serves https only, requires a
client certificate signed by its CA (--client-cert-auth) and has its authentication on; the
nodes give torch's --rdzv-conf cacert=, cert=, key= and rankrun's user=, password_file=. What
etcd refuses, or a certificate that fails verification, ends the node at once with 121 (as an
etcd it cannot reach does after join_timeout) and says what to change.

The `etcd_hosts` fixture (below) builds the rig through the `hosts` fixture and stops etcd by pid
(SIGTERM, then SIGKILL) before the `hosts` teardown checks that nothing is left in any
namespace."""
import json
import re
import signal
import subprocess
import time

import pytest

from harness import PYTHON, SCRIPTS, TORCH_TESTS
from netns import finish_all, hosts, report  # noqa: F401  (hosts is the fixture)
from elastic_common import (JOB, NODE_TIMEOUT, NPROC, RDZV_CLOSED, RDZV_FAILED, RDZV_LOST, SLACK, TERM_TIMEOUT,
                            assert_summary, assert_tmp_clean, check_round, line_time, now_report, records, start_node,
                            wait_all)
from outsider import FORGED, WORKER_REFUSED, assert_nothing_given, attack, refused_lines, value

pytestmark = [*TORCH_TESTS,
              pytest.mark.skipif(subprocess.run(["sh", "-c", "command -v etcd && command -v etcdctl"],
                                                capture_output=True).returncode != 0,
                                 reason="etcd and etcdctl (Debian's etcd-server, etcd-client) are not installed")]

ETCD_PORT = 2379
ETCD_OUTSIDER = SCRIPTS / "etcd_outsider.py"


# --- etcd in a host of the rig -----------------------------------------------------------------
class Etcd:
    """A single-member etcd listening on host `host`'s eth0 address, port 2379; peers on the
    namespace's loopback (the rig sets `lo` up in every host)."""

    def __init__(self, rig, index, data_dir, pki=None):
        self.rig, self.host = rig, rig.host(index)
        self.addr = self.host.addr
        self.pki = pki
        self.user = None  # etcdctl's --user once authentication is on
        self.endpoint = f"{'https' if pki else 'http'}://{self.addr}:{ETCD_PORT}"
        tls = [] if not pki else ["--cert-file", pki.path("server.pem"), "--key-file", pki.path("server.key"),
                                  "--trusted-ca-file", pki.path("ca.pem"), "--client-cert-auth"]
        self.proc = self.host.popen(
            ["etcd", "--name", "rr", "--data-dir", data_dir,
             "--listen-client-urls", self.endpoint, "--advertise-client-urls", self.endpoint,
             "--listen-peer-urls", "http://127.0.0.1:2380", "--initial-advertise-peer-urls", "http://127.0.0.1:2380",
             "--initial-cluster", "rr=http://127.0.0.1:2380", "--initial-cluster-state", "new",
             "--heartbeat-interval", "10", "--election-timeout", "100", "--unsafe-no-fsync",
             "--logger", "zap", "--log-level", "error", *tls])

    def ctl(self, *args, timeout=10):
        """etcdctl in etcd's own host (the other hosts reach it the same way)."""
        tls = [] if not self.pki else [f"--cacert={self.pki.path('ca.pem')}", f"--cert={self.pki.path('client.pem')}",
                                       f"--key={self.pki.path('client.key')}"]
        user = [f"--user={self.user}"] if self.user else []
        return subprocess.run(["ip", "netns", "exec", self.host.ns, "etcdctl", f"--endpoints={self.endpoint}",
                               "--dial-timeout=1s", "--command-timeout=2s", *tls, *user, *args],
                              capture_output=True, text=True, timeout=timeout)

    def wait_healthy(self, timeout=15):
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                pytest.fail(f"etcd exited with {self.proc.poll()}\n{self.proc.stderr[-3000:]}")
            r = self.ctl("endpoint", "health")
            if r.returncode == 0:
                return
            if time.monotonic() >= deadline:
                pytest.fail(f"etcd not healthy after {timeout}s: {r.stdout}{r.stderr}\n{self.proc.stderr[-3000:]}")
            time.sleep(0.05)

    def get(self, key, tries=3):
        """The value of key, or None. etcdctl's 2 s deadline is tried again (a loaded machine)."""
        for _ in range(tries):
            r = self.ctl("get", key, "--print-value-only")
            if r.returncode == 0 or "deadline exceeded" not in r.stderr:
                break
        assert r.returncode == 0, f"etcdctl get {key}: {r.stdout}{r.stderr}"
        return r.stdout.rstrip("\n") if r.stdout else None

    def coordinator_pid(self):
        """The pid in /rankrun/job1/coordinator ("<hostname> pid <pid>"), or None."""
        value = self.get(f"/rankrun/{JOB}/coordinator")
        m = re.search(r" pid (\d+)$", value or "")
        return int(m.group(1)) if m else None

    def stop(self, signo=signal.SIGTERM, wait=5):
        """Signal etcd (by its pid) and wait for its exit; SIGKILL if SIGTERM does not end it."""
        if self.proc.poll() is None:
            self.proc.signal(signo)
            if self.proc.wait(wait) is None:
                self.proc.signal(signal.SIGKILL)
                self.proc.wait(5)
        return self.proc.poll()


@pytest.fixture
def etcd_hosts(hosts, tmp_path):
    """`rig, etcd = etcd_hosts(n)`: n node hosts (0..n-1) and host n running etcd, healthy.
    Teardown stops etcd by pid before the `hosts` fixture checks for leftovers."""
    started = []

    def make(n):
        rig = hosts(n + 1)
        data = tmp_path / f"etcd-{len(started)}"
        etcd = Etcd(rig, n, str(data))
        started.append(etcd)
        etcd.wait_healthy()
        return rig, etcd

    yield make
    for etcd in started:
        etcd.stop()


# --- etcd over https, with its users ------------------------------------------------------------------
class Pki:
    """Certificates made with the openssl command in `d`: a CA; etcd's certificate, for its host's
    address; a client certificate with no Common Name (etcd's JSON gateway refuses one with a CN
    once its authentication is on); another CA, which signed nothing etcd knows."""

    def __init__(self, d, etcd_addr):
        self.dir = d
        d.mkdir()
        script = f"""set -e
key() {{ openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1.key"; }}
ca() {{ key "$1"; openssl req -x509 -new -key "$1.key" -out "$1.pem" -days 2 -subj "$2"; }}
issue() {{
  key "$1"; openssl req -new -key "$1.key" -out "$1.csr" -subj "$2"; printf "$3" >"$1.ext"
  openssl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -out "$1.pem" -days 2 -extfile "$1.ext"
}}
ca ca /CN=rankrun-test-ca
ca other-ca /CN=other-ca
issue server /CN=etcd 'subjectAltName=IP:{etcd_addr},IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n'
issue client /O=rankrun-test 'extendedKeyUsage=clientAuth\n'
"""
        r = subprocess.run(["sh", "-c", script], cwd=d, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, f"openssl: {r.stdout}{r.stderr}"

    def path(self, name):
        return str(self.dir / name)


@pytest.fixture
def etcd_tls_hosts(hosts, tmp_path):
    """`rig, etcd = etcd_tls_hosts(n)`: as etcd_hosts, with etcd over https only, requiring a client
    certificate signed by the Pki's CA, and its authentication on: root, and the user "job"
    (password in tmp_path/job.password, mode 600) whose role may read and write /rankrun/ only.
    `etcd_tls_hosts(n, outsiders=k)`: k more hosts after etcd's (n+1..n+k), which run nothing."""
    started = []

    def make(n, outsiders=0):
        rig = hosts(n + 1 + outsiders)
        pki = Pki(tmp_path / "pki", rig.host(n).addr)
        etcd = Etcd(rig, n, str(tmp_path / "etcd-tls"), pki)
        started.append(etcd)
        etcd.wait_healthy()
        for args in (["user", "add", "root", "--new-user-password=rootpw"], ["user", "grant-role", "root", "root"],
                     ["user", "add", "job", "--new-user-password=jobpw"], ["role", "add", "rankrun"],
                     ["role", "grant-permission", "rankrun", "--prefix=true", "readwrite", "/rankrun/"],
                     ["user", "grant-role", "job", "rankrun"], ["auth", "enable"]):
            r = etcd.ctl(*args)
            assert r.returncode == 0, f"etcdctl {' '.join(args)}: {r.stdout}{r.stderr}"
        etcd.user = "root:rootpw"
        password = tmp_path / "job.password"
        password.write_text("jobpw\n")
        password.chmod(0o600)
        etcd.password_file = password
        return rig, etcd

    yield make
    for etcd in started:
        etcd.stop()


def tls_conf(etcd, cacert="ca", cert="client", password_file=None):
    """--rdzv-conf's keys for https and etcd's user "job"."""
    pki = etcd.pki
    conf = [f"cacert={pki.path(cacert + '.pem')}"]
    if cert:
        conf += [f"cert={pki.path(cert + '.pem')}", f"key={pki.path(cert + '.key')}"]
    conf += ["user=job", f"password_file={password_file or etcd.password_file}"]
    return ",".join(conf)


# --- helpers -------------------------------------------------------------------------------------
def summaries(outs):
    """The hosts whose stderr has the job-wide summary."""
    return [o.host for o in outs if "rankrun: job summary" in o.stderr or "rankrun: rounds:" in o.stderr]




def coordinator_host(etcd, procs, since, timeout=10):
    """The index (in procs) of the node whose rankrun holds the coordinator key."""
    deadline = time.monotonic() + timeout
    while True:
        pid = etcd.coordinator_pid()
        found = [i for i, p in enumerate(procs) if p.pid == pid]
        if found:
            return found[0]
        if time.monotonic() >= deadline:
            pytest.fail(f"/rankrun/{JOB}/coordinator names pid {pid}, none of {[p.pid for p in procs]}\n"
                        + now_report(procs, since))
        time.sleep(0.1)


# --- the tests -------------------------------------------------------------------------------
def test_three_nodes_etcd_allreduce(etcd_hosts, tmp_path):
    """--nnodes=3 with etcd: one round of 3 nodes, world 6, the all_reduce sums to 6, ranks 0-5
    once each, node ranks in address order, every node exits 0. Node rank 0 (host 0) hosts the
    workers' store: every worker has MASTER_ADDR = host 0 and the same MASTER_PORT. Exactly one
    node prints the job summary: the one elected coordinator in etcd."""
    rig, etcd = etcd_hosts(3)
    ep = f"{etcd.addr}:{ETCD_PORT}"
    t0 = time.monotonic()
    procs = [start_node(rig, tmp_path, h, "3", "etcd", ep, ["3"]) for h in range(3)]
    wait_all(procs, r"\] sum=6 ", NPROC, timeout=40, since=t0)
    coord = coordinator_host(etcd, procs, t0)
    outs = finish_all(procs, timeout=60, since=t0)
    for o in outs:
        assert o.returncode == 0, report(outs)
    check_round(outs, rig, 0, [0, 1, 2], 6)
    for o in outs:
        for _, f in records(o, "start", 6):
            assert f["TORCHELASTIC_RESTART_COUNT"] == "0", report(outs)
    assert summaries(outs) == [coord], \
        f"the summary is on hosts {summaries(outs)}; host {coord} is the coordinator\n" + report(outs)
    assert_summary(outs[coord], [(3, 6)], 3, outs)
    assert_tmp_clean(outs)


def lost_node(etcd_hosts, tmp_path, kill_coordinator):
    """A 2:3 job of three nodes with --max-restarts=0; once every worker has done its all_reduce,
    SIGKILL one node's rankrun: the coordinator or another one. Its etcd lease lapses after
    --node-timeout; the (possibly new) coordinator names it lost, the two others stop their
    workers and restart in round 1 with world 4 (no restart spent) and finish with 0."""
    rig, etcd = etcd_hosts(3)
    ep = f"{etcd.addr}:{ETCD_PORT}"
    t0 = time.monotonic()
    # world 6 sleeps 60 s (it is interrupted), world 4 finishes at once
    procs = [start_node(rig, tmp_path, h, "2:3", "etcd", ep, ["60", "4:0"], extra=["--max-restarts=0"])
             for h in range(3)]
    wait_all(procs, r"\] sum=6 ", NPROC, timeout=40, since=t0)
    coord = coordinator_host(etcd, procs, t0)
    victim = coord if kill_coordinator else max(h for h in range(3) if h != coord)
    t_kill = time.monotonic()
    procs[victim].signal(signal.SIGKILL)
    outs = finish_all(procs, timeout=NODE_TIMEOUT + SLACK + 30, since=t_kill)
    av = rig.host(victim).addr
    assert outs[victim].returncode == -signal.SIGKILL, report(outs)
    survivors = [o for o in outs if o.host != victim]
    for o in survivors:
        assert o.returncode == 0, report(outs)
        t = line_time(o, rf"stopping the job: node {re.escape(av)} lost; restarting with 2 nodes, round 1$")
        assert t is not None, f"host {o.host} does not say it stops for round 1\n" + report(outs)
        assert NODE_TIMEOUT - 1 <= t <= NODE_TIMEOUT + SLACK, f"round 1 after {t} s\n" + report(outs)
        assert records(o, "done", 6) == [], report(outs)  # the first round's workers were stopped
    round0 = check_round(outs, rig, 0, [0, 1, 2], 6, done=False)
    check_round(survivors, rig, 1, [h for h in range(3) if h != victim], 4, before=round0)
    for o in survivors:
        for _, f in records(o, "start", 4):
            assert f["TORCHELASTIC_RESTART_COUNT"] == "0", "a membership change spent a restart\n" + report(outs)
    # the coordinator (the new one if the old was killed) names the lost node and prints the summary
    lost = [o.host for o in survivors if re.search(rf"node \d+ \({re.escape(av)}\) is lost: its etcd lease lapsed",
                                                   o.stderr)]
    assert len(lost) == 1, f"hosts {lost} say {av} is lost\n" + report(outs)
    assert summaries(outs) == lost, f"the summary is on hosts {summaries(outs)}\n" + report(outs)
    if kill_coordinator:
        assert re.search(r"this node coordinates the rounds from now on \(the coordinator before it is gone\): "
                         r"round 0 runs with 3 nodes", outs[lost[0]].stderr), report(outs)
        # round 0 was formed by the coordinator before: it is listed, not as "(world 6)"
        assert re.search(r"^rankrun:   round 0: 3 nodes \(formed before this node coordinated\)$", outs[lost[0]].stderr,
                         re.M), report(outs)
        assert "rankrun:   round 1: 2 nodes (world 4)" in outs[lost[0]].stderr, report(outs)
        assert_summary(outs[lost[0]], [], 2, outs)
    else:
        assert lost == [coord], report(outs)
        assert_summary(outs[lost[0]], [(3, 6), (2, 4)], 2, outs)
    left = rig.wait_empty(victim, timeout=10)
    assert left == [], f"host {victim}'s processes outlive its rankrun: {left}\n" + report(outs)
    assert_tmp_clean(survivors)


def test_lost_node_restarts_the_survivors(etcd_hosts, tmp_path):
    lost_node(etcd_hosts, tmp_path, kill_coordinator=False)


def test_lost_coordinator_is_replaced_and_the_survivors_restart(etcd_hosts, tmp_path):
    """As above, the victim being the coordinator: once its lease lapses a survivor is elected,
    resumes round 0 from etcd, names the victim lost, runs round 1 and prints the summary, which
    lists round 0 as formed before it coordinated."""
    lost_node(etcd_hosts, tmp_path, kill_coordinator=True)


def test_new_node_joins_a_running_job(etcd_hosts, tmp_path):
    """A 2:3 job runs on hosts 0 and 1 (world 4); host 2 then starts the same command: everyone
    restarts in round 1 with 3 nodes and world 6, and finishes with 0."""
    rig, etcd = etcd_hosts(3)
    ep = f"{etcd.addr}:{ETCD_PORT}"
    t0 = time.monotonic()
    args = ["60", "6:0"]  # world 4 sleeps (it is interrupted), world 6 finishes at once
    first = [start_node(rig, tmp_path, h, "2:3", "etcd", ep, args) for h in range(2)]
    wait_all(first, r"\] sum=4 ", NPROC, timeout=40, since=t0)
    t_join = time.monotonic()
    procs = first + [start_node(rig, tmp_path, 2, "2:3", "etcd", ep, args)]
    outs = finish_all(procs, timeout=60, since=t_join)
    for o in outs:
        assert o.returncode == 0, report(outs)
    for o in outs[:2]:
        t = line_time(o, rf"stopping the job: node {re.escape(rig.host(2).addr)} joined; restarting with 3 nodes, "
                         rf"round 1$")
        assert t is not None and t <= SLACK, report(outs)
        assert records(o, "done", 4) == [], report(outs)
    round0 = check_round(outs[:2], rig, 0, [0, 1], 4, done=False)
    assert "round 0:" not in outs[2].stderr, report(outs)  # the newcomer starts in round 1
    check_round(outs, rig, 1, [0, 1, 2], 6, before=round0)
    assert len(summaries(outs)) == 1, report(outs)
    assert_summary(outs[summaries(outs)[0]], [(2, 4), (3, 6)], 3, outs)
    assert_tmp_clean(outs)


@pytest.mark.parametrize("how", ["sigkill", "cable-cut"])
def test_etcd_lost_mid_job_stops_every_node_with_123(etcd_hosts, tmp_path, how):
    """etcd goes away while the workers of a 3-node job sleep (sigkill: etcd's pid is SIGKILLed,
    the nodes' connections are refused; cable-cut: etcd's host is cut off at the switch, nothing
    answers): every node's link fails within --node-timeout (+ slack), the nodes stop their
    workers and exit 123 naming etcd's address; no worker finishes and nothing is left running
    (the fixture checks every namespace)."""
    rig, etcd = etcd_hosts(3)
    ep = f"{etcd.addr}:{ETCD_PORT}"
    t0 = time.monotonic()
    procs = [start_node(rig, tmp_path, h, "3", "etcd", ep, ["60"]) for h in range(3)]
    wait_all(procs, r"\] sum=6 ", NPROC, timeout=40, since=t0)
    t_kill = time.monotonic()
    if how == "sigkill":
        etcd.stop(signal.SIGKILL)
    else:
        rig.cut(3)
    outs = finish_all(procs, timeout=NODE_TIMEOUT + SLACK + TERM_TIMEOUT + 10, since=t_kill)
    for o in outs:
        assert o.returncode == RDZV_LOST, report(outs)
        assert o.elapsed <= NODE_TIMEOUT + TERM_TIMEOUT + SLACK, f"host {o.host} took {o.elapsed:.1f}s\n" + report(outs)
        assert f"etcd at {ep}" in o.stderr, f"host {o.host} does not name etcd at {ep}\n" + report(outs)
        assert records(o, "done", 6) == [], report(outs)
    for h in range(3):
        assert rig.wait_empty(h, timeout=5) == [], report(outs)


def test_master_port_is_the_workers_store_port(etcd_hosts, tmp_path):
    """--master-port=P: node rank 0 hosts the workers' store on P (not a kernel-chosen port), and
    every worker of both nodes gets MASTER_ADDR = node rank 0, MASTER_PORT = P."""
    rig, etcd = etcd_hosts(2)
    ep = f"{etcd.addr}:{ETCD_PORT}"
    port = 29517
    t0 = time.monotonic()
    procs = [start_node(rig, tmp_path, h, "2", "etcd", ep, extra=[f"--master-port={port}"]) for h in range(2)]
    outs = finish_all(procs, timeout=60, since=t0)
    for o in outs:
        assert o.returncode == 0, report(outs)
    check_round(outs, rig, 0, [0, 1], 4)
    for o in outs:
        assert {f["MASTER_PORT"] for _, f in records(o, "start", 4)} == {str(port)}, report(outs)
    assert_tmp_clean(outs)


def test_etcd_unreachable_at_start_fails_with_121(etcd_hosts, tmp_path):
    """No etcd listens at the endpoint (its host is up, etcd stopped): with join_timeout=3 every
    node exits 121 after ~3 s naming the endpoint it could not reach; no worker starts."""
    rig, etcd = etcd_hosts(2)
    etcd.stop()
    ep = f"{etcd.addr}:{ETCD_PORT}"
    t0 = time.monotonic()
    procs = [start_node(rig, tmp_path, h, "2", "etcd", ep, join_timeout=3) for h in range(2)]
    outs = finish_all(procs, timeout=3 + SLACK + 10, since=t0)
    for o in outs:
        assert o.returncode == RDZV_FAILED, report(outs)
        assert 2.5 <= o.elapsed <= 3 + SLACK, report(outs)
        assert f"could not reach etcd at {ep}" in o.stderr, report(outs)
        assert o.stdout == "", report(outs)
    assert_tmp_clean(outs)


def test_node_beyond_max_is_a_spare_and_exits_119(etcd_hosts, tmp_path):
    """--nnodes=2:2 on hosts 0 and 1, then host 2: the job is full, host 2 is told it waits as a
    spare, starts no worker, and exits 119 once the job ends (with 0 on hosts 0 and 1). The job
    runs on for 2 x --node-timeout after the spare is told, as a spare waits in a real job (a
    shorter wait hides whether the spare stays known to the coordinator)."""
    rig, etcd = etcd_hosts(3)
    ep = f"{etcd.addr}:{ETCD_PORT}"
    go = tmp_path / "go"
    env = {"GO_FILE": str(go)}
    args = ["60"]  # runs until `go` exists
    t0 = time.monotonic()
    first = [start_node(rig, tmp_path, h, "2:2", "etcd", ep, args, env=env) for h in range(2)]
    wait_all(first, r"^rankrun: round 0: 2 nodes, world size 4", 1, timeout=30, since=t0, stream="err")
    spare = start_node(rig, tmp_path, 2, "2:2", "etcd", ep, args, env=env)
    procs = first + [spare]
    if not spare.wait_for(r"the job has its maximum of 2 nodes \(--nnodes=MIN:MAX\); this node waits as a spare",
                          timeout=SLACK + 5, stream="err"):
        pytest.fail("host 2 is not told it is a spare\n" + now_report(procs, t0))
    t_told = time.monotonic()
    wait_all(first, r"\] sum=4 ", NPROC, timeout=40, since=t0)
    time.sleep(max(0.0, t_told + 2 * NODE_TIMEOUT - time.monotonic()))
    assert spare.poll() is None, "the spare left while the job ran\n" + now_report(procs, t0)
    t_go = time.monotonic()
    go.touch()
    outs = finish_all(procs, timeout=15, since=t_go)
    assert [o.returncode for o in outs[:2]] == [0, 0], report(outs)
    check_round(outs[:2], rig, 0, [0, 1], 4)  # the spare is in no node map
    assert summaries(outs[:2]) != [], report(outs)
    s = outs[2]
    assert s.stdout == "", "the spare started workers\n" + report(outs)
    assert "round 0:" not in s.stderr, report(outs)
    assert s.elapsed <= max(o.elapsed for o in outs[:2]) + 5, "the spare outlived the job\n" + report(outs)
    assert_tmp_clean(outs)
    assert s.returncode == RDZV_CLOSED, report(outs)
    assert "the rendezvous is closed: the job ended with exit code 0" in s.stderr, report(outs)


def test_https_with_etcd_users_two_nodes_allreduce(etcd_tls_hosts, tmp_path):
    """Two nodes over https://, each with cacert=, cert=, key=, user=job and password_file=: one round
    of 2 nodes, world 4, the all_reduce sums to 4, every node exits 0, as over http. The
    coordinator's key is in etcd under /rankrun/job1/ (read as root)."""
    rig, etcd = etcd_tls_hosts(2)
    ep = f"https://{etcd.addr}:{ETCD_PORT}"
    t0 = time.monotonic()
    procs = [start_node(rig, tmp_path, h, "2", "etcd", ep, ["4"], conf=tls_conf(etcd)) for h in range(2)]
    wait_all(procs, r"\] sum=4 ", NPROC, timeout=40, since=t0)
    coord = coordinator_host(etcd, procs, t0)
    outs = finish_all(procs, timeout=60, since=t0)
    for o in outs:
        assert o.returncode == 0, report(outs)
    check_round(outs, rig, 0, [0, 1], 4)
    assert summaries(outs) == [coord], report(outs)
    assert_tmp_clean(outs)


def test_https_refusals_end_the_node_at_once_with_121(etcd_tls_hosts, tmp_path):
    """Three nodes, each set up wrong in its own way, against the https etcd with users: host 0's
    cacert is another CA (etcd's certificate fails verification), host 1 gives no client
    certificate (etcd refuses the handshake), host 2 a wrong password. Each exits 121, as for an
    etcd it cannot reach, but at once rather than after join_timeout (20 s), naming what to change;
    no worker starts."""
    rig, etcd = etcd_tls_hosts(3)
    ep = f"{etcd.addr}:{ETCD_PORT}"
    wrong = tmp_path / "wrong.password"
    wrong.write_text("not-jobpw\n")
    wrong.chmod(0o600)
    confs = [tls_conf(etcd, cacert="other-ca"), tls_conf(etcd, cert=None), tls_conf(etcd, password_file=wrong)]
    t0 = time.monotonic()
    procs = [start_node(rig, tmp_path, h, "3", "etcd", ep, conf=confs[h]) for h in range(3)]
    outs = finish_all(procs, timeout=20 + SLACK, since=t0)
    expected = [
        f"rankrun: error: cannot use etcd at {ep}: TLS handshake failed: etcd's certificate (CN=etcd, issued by "
        f"CN=rankrun-test-ca) is not signed by the CA in cacert={etcd.pki.path('other-ca.pem')}",
        f"rankrun: error: cannot use etcd at {ep}: etcd refused the connection (sslv3 alert bad certificate): it "
        f"requires a client certificate; give cert=PATH,key=PATH",
        f"rankrun: error: cannot use etcd at {ep}: user 'job' could not log in: etcdserver: authentication failed, "
        f"invalid user ID or password; check the user name and password_file={wrong}",
    ]
    for o, line in zip(outs, expected):
        assert o.returncode == RDZV_FAILED, report(outs)
        assert o.elapsed <= SLACK, f"host {o.host} took {o.elapsed:.1f}s\n" + report(outs)
        assert line in o.stderr, f"host {o.host} does not say {line!r}\n" + report(outs)
        assert o.stdout == "", report(outs)
    assert_tmp_clean(outs)


def test_a_user_refused_mid_job_ends_the_nodes_at_once(etcd_tls_hosts, tmp_path):
    """Two nodes over https as user "job", --node-timeout=30; while the workers sleep, root
    revokes the role's permission on /rankrun/. Each node's next request to etcd is refused:
    it stops its workers and exits 123 within a lease interval (10 s) naming the permission,
    rather than retrying for --node-timeout."""
    rig, etcd = etcd_tls_hosts(2)
    ep = f"https://{etcd.addr}:{ETCD_PORT}"
    t0 = time.monotonic()
    procs = [start_node(rig, tmp_path, h, "2", "etcd", ep, ["60"], conf=tls_conf(etcd), node_timeout=30)
             for h in range(2)]
    wait_all(procs, r"\] sum=4 ", NPROC, timeout=40, since=t0)
    r = etcd.ctl("role", "revoke-permission", "rankrun", "/rankrun/", "--prefix=true")
    assert r.returncode == 0, f"etcdctl role revoke-permission: {r.stdout}{r.stderr}"
    t_revoke = time.monotonic()
    outs = finish_all(procs, timeout=60, since=t_revoke)
    for o in outs:
        assert o.returncode == RDZV_LOST, report(outs)
        assert o.elapsed <= 30 / 3 + TERM_TIMEOUT + SLACK, f"host {o.host} took {o.elapsed:.1f}s\n" + report(outs)
        assert "user 'job' may not use the keys under '/rankrun/job1/'" in o.stderr, report(outs)
        assert records(o, "done", 4) == [], report(outs)
    assert_tmp_clean(outs)


def workers_only(name):
    """Why node rank 0's store refuses a connection that names key space `name`."""
    return f"asked for key space '{name}' by name, and this store serves its workers only"


def test_etcd_job_refuses_an_outsider(etcd_tls_hosts, tmp_path):
    """Two nodes over https with etcd's users, --master-port fixed; host 3 is on the job's network
    and not one of its hosts. While the workers wait for the go file, host 3 tries node 0's
    workers' store by hand (scripts/hostile_agent.py: the agents' attacks, the workers' key
    space by name and through the handshake, an unmodified torch client's SET) and etcd itself
    (scripts/etcd_outsider.py: plain http, https without a client certificate, with one but no
    user, a put and a read under /rankrun/job1/). The store closes every connection having given nothing (it serves no key space by
    name: the agents meet in etcd), and logs host 3 once as an agent and once as a worker;
    etcd refuses each try at once and holds nothing of host 3's. The job runs its one round to
    the end with exit 0 on both nodes."""
    rig, etcd = etcd_tls_hosts(2, outsiders=1)
    outsider = 3
    ep = f"https://{etcd.addr}:{ETCD_PORT}"
    port = 29518
    go = tmp_path / "go"
    t0 = time.monotonic()
    procs = [start_node(rig, tmp_path, h, "2", "etcd", ep, ["60"], conf=tls_conf(etcd),
                        extra=[f"--master-port={port}"], env={"GO_FILE": str(go)}) for h in range(2)]
    wait_all(procs, r"\] sum=4 ", NPROC, timeout=40, since=t0)
    # node rank 0 (host 0, the lower address) hosts the workers' store
    attacks = ("forge-stop", "claim-node", "join", "read-nodes", "attempt-by-name", "attempt-hello", "worker")
    results = attack(rig, outsider, rig.host(0).addr, port, attacks, run_id=JOB)
    pki = etcd.pki
    r = rig.host(outsider).run([PYTHON, ETCD_OUTSIDER, etcd.addr, ETCD_PORT, pki.path("ca.pem"), pki.path("client.pem"),
                                pki.path("client.key"), f"/rankrun/{JOB}/"], timeout=60)
    assert r.returncode == 0, r
    tries = {t["try"]: t for t in map(json.loads, r.stdout.splitlines())}
    coordinator = etcd.get(f"/rankrun/{JOB}/coordinator")
    go.touch()
    outs = finish_all(procs, timeout=60, since=t0)
    for o in outs:
        assert o.returncode == 0, report(outs)
        for forged in FORGED:
            assert forged not in o.stderr and forged not in o.stdout, report(outs)
    check_round(outs, rig, 0, [0, 1], 4)
    for o in outs:
        assert "round 1" not in o.stderr, report(outs)
        assert {f["MASTER_PORT"] for _, f in records(o, "start", 4)} == {str(port)}, report(outs)
        assert {f["TORCHELASTIC_RESTART_COUNT"] for _, f in records(o, "start", 4)} == {"0"}, report(outs)
    # the store: nothing given, every connection closed
    assert_nothing_given(results, outs, [a for a in attacks if a != "attempt-hello"])
    assert results["attempt-hello"][0] == value(b"refused:" + workers_only("attempt_0").encode()), \
        f"attempt-hello: {results['attempt-hello'][0]!r}\n" + report(outs)
    # node 0 logs host 3 once as a worker, once as an agent (its first attack), and nothing else of it
    addr = rig.host(outsider).addr
    assert WORKER_REFUSED.findall(outs[0].stderr) == [addr], report(outs)
    assert refused_lines(outs[0]) == [(addr, workers_only("rankrun-agents"))], report(outs)
    assert len([l for l in outs[0].stderr.splitlines() if addr in l]) == 2, report(outs)
    assert addr not in outs[1].stderr, report(outs)
    # etcd: each try refused at once, by etcd
    for t in tries.values():
        assert t["seconds"] < 3, f"{t}: not refused at once\n{r}"
    # plain http to the https-only port, TLS 1.3 without a certificate: closed with no HTTP reply
    closed = ("RemoteDisconnected", "ConnectionResetError", "BrokenPipeError")
    assert tries["http"]["status"] is None and tries["http"]["error"].startswith(closed), r
    assert tries["no-cert-tls13"]["status"] is None and tries["no-cert-tls13"]["error"].startswith(
        ("SSLError: [SSL: SSLV3_ALERT_BAD_CERTIFICATE]", "SSLError: [SSL: TLSV13_ALERT_CERTIFICATE_REQUIRED]",
         "SSLEOFError", *closed)), r
    assert tries["no-cert"]["status"] is None and \
        tries["no-cert"]["error"].startswith("SSLError: [SSL: SSLV3_ALERT_BAD_CERTIFICATE]"), r
    for name in ("no-user", "no-user-read"):
        assert tries[name]["status"] == 403 and "etcdserver: permission denied" in tries[name]["body"], r
    m = re.search(r" pid (\d+)$", coordinator or "")
    assert m and int(m.group(1)) in [p.pid for p in procs], f"/rankrun/{JOB}/coordinator is {coordinator!r}"
    assert_tmp_clean(outs)
