"""A running job seen from outside: `rankrun status` over the run directory's socket, the event
log (--events), Prometheus metrics (--metrics-port, --metrics-textfile) scraped by a real
Prometheus and checked by promtool. Real rankrun processes, real PyTorch where a rank must be
in a collective."""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from harness import PYTHON, RANKRUN, ROOT, SCRIPTS, Running, run, torch_only
from netns import finish_all, hosts, report  # noqa: F401  (hosts is the fixture)

JOB = SCRIPTS / "observe_job.py"
EVENTS_DOC = ROOT / "docs" / "events.md"


def status(tmp, *args, timeout=20):
    env = dict(os.environ, TMPDIR=str(tmp))
    return subprocess.run([str(RANKRUN), "status", *map(str, args)], capture_output=True, text=True, env=env,
                          timeout=timeout)


def status_until(tmp, accept, timeout=30, args=()):
    """`rankrun status --json` until `accept(answer)` holds; returns the answer."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        r = status(tmp, "--json", *args)
        if r.returncode == 0:
            last = json.loads(r.stdout)
            if accept(last):
                return last
        time.sleep(0.3)
    pytest.fail(f"status never showed what was expected; last: {json.dumps(last, indent=1)}")


def start(tmp, args, env=None):
    full = {"TMPDIR": str(tmp), "OMP_NUM_THREADS": "1"}
    full.update(env or {})
    return Running(list(map(str, args)), env=full)


def metrics_port(job):
    line = job.wait_for_stderr(r"metrics at http://127\.0\.0\.1:\d+/metrics")
    return int(re.search(r":(\d+)/metrics", line).group(1))


def run_dir(tmp):
    dirs = [d for d in Path(tmp).glob("rankrun-*") if (d / "status.sock").exists()]
    assert len(dirs) == 1, dirs
    return dirs[0]


def connect(directory):
    """A connection to the job's status socket (through the directory: pytest's paths are longer
    than a socket address holds)."""
    fd = os.open(directory, os.O_PATH | os.O_DIRECTORY)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(f"/proc/self/fd/{fd}/status.sock")
    os.close(fd)
    return s


def read_all(s):
    """Everything until the server closes; a close with our bytes unread (a reset) counts as a close."""
    chunks = []
    while True:
        try:
            b = s.recv(65536)
        except ConnectionResetError:
            return b"".join(chunks)
        if not b:
            return b"".join(chunks)
        chunks.append(b)


def schema():
    """docs/events.md's table: type -> the members it must have."""
    types = {}
    for line in EVENTS_DOC.read_text().splitlines():
        m = re.match(r"^\| `([a-z_]+)` \| ((?:`[a-z_]+`(?:, )?)+) \|", line)
        if m and m.group(1) not in ("schema", "type", "time", "unix", "node"):
            types[m.group(1)] = re.findall(r"`([a-z_]+)`", m.group(2))
    assert {"job_started", "worker_ended", "restart", "hang", "job_ended"} <= set(types), types
    return types


def events(path):
    """Every line of the event log, parsed and checked against the documented schema."""
    types = schema()
    out = []
    for line in Path(path).read_text().splitlines():
        e = json.loads(line)
        assert e["schema"] == 1 and isinstance(e["unix"], float) and isinstance(e["node"], int), e
        assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$", e["time"]), e
        assert e["type"] in types, f"{e['type']} is not in docs/events.md"
        missing = [m for m in types[e["type"]] if m not in e]
        assert not missing, f"{e['type']} lacks {missing}: {e}"
        out.append(e)
    return out


# --- rankrun status ----------------------------------------------------------------------------
@torch_only
def test_status_shows_every_rank_where_it_is_and_the_straggler(tmp_path):
    go = tmp_path / "go"
    job = start(tmp_path, ["--nproc-per-node", "4", JOB], env={"HOLD": "60", "GO_FILE": str(go)})
    try:
        job.wait_for_lines(r"ready rank=", 4, timeout=60)
        s = status_until(tmp_path, lambda s: all(r["in"] == "barrier" for r in s["ranks"][1:]) and s["stragglers"] == [0])
        assert s["state"] == "running" and s["world_size"] == 4 and s["nnodes"] == 1, s
        assert [r["rank"] for r in s["ranks"]] == [0, 1, 2, 3], s
        for r in s["ranks"]:
            assert r["running"] and r["pid"] > 0 and r["rss_bytes"] > 0 and r["cpu_seconds"] >= 0, r
            assert r["state"] == "running", r
        assert s["ranks"][0]["in"] == "" and "observe_job.py:" in s["ranks"][0]["at"], s
        assert s["stuck_seconds"] is None and s["progress_timeout_seconds"] == 180, s
        text = status(tmp_path)
        assert text.returncode == 0, text
        assert re.search(r"^rankrun: .*observe_job\.py: running, restarts 0 of 0, up ", text.stdout, re.M), text.stdout
        assert re.search(r"^  1 +1 +0 +\d+ +running +barrier ", text.stdout, re.M), text.stdout
        assert "straggler: rank 0 outside the collectives while others wait" in text.stdout, text.stdout
    finally:
        go.touch()
        done = job.finish(timeout=90)
    assert done.returncode == 0, done


def test_status_says_when_there_is_no_job_or_several(tmp_path):
    r = status(tmp_path)
    assert r.returncode == 1 and f"no running rankrun job of yours in {tmp_path}" in r.stderr, r
    jobs = [start(tmp_path, ["--nproc-per-node", "1", "--no-python", "sleep", "20"]) for _ in range(2)]
    try:
        deadline = time.monotonic() + 20
        while len(list(tmp_path.glob("rankrun-*/status.sock"))) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        r = status(tmp_path)
        assert r.returncode == 2 and "2 running jobs in" in r.stderr, r
        dirs = sorted(tmp_path.glob("rankrun-*"))
        for d in dirs:
            assert f"rankrun status {d}    # rankrun: sleep: running" in r.stderr, r
        one = status(tmp_path, dirs[0])
        assert one.returncode == 0 and "rankrun: sleep: running" in one.stdout, one
        bad = status(tmp_path, "--frobnicate")
        assert bad.returncode == 2 and "unknown argument '--frobnicate'" in bad.stderr, bad
    finally:
        for j in jobs:
            j.signal(signal.SIGTERM)
            j.finish()


def test_a_malformed_or_oversized_request_closes_only_itself(tmp_path):
    job = start(tmp_path, ["--nproc-per-node", "2", "--metrics-port", "127.0.0.1:0", "--no-python", "sleep", "8"])
    try:
        port = metrics_port(job)
        deadline = time.monotonic() + 10
        while not list(tmp_path.glob("rankrun-*/status.sock")) and time.monotonic() < deadline:
            time.sleep(0.1)
        d = run_dir(tmp_path)
        assert oct((d / "status.sock").stat().st_mode & 0o777) == "0o600"
        with connect(d) as s:  # not a request
            s.sendall(b"hello\n")
            assert read_all(s).startswith(b"error: unknown request")
        with connect(d) as s:  # a line longer than any request: closed unanswered, at once (a client
            s.settimeout(3)    # merely slow is closed after 5 s)
            s.sendall(b"x" * 300)
            assert read_all(s) == b""
        with connect(d) as s:  # still serving
            s.sendall(b"status json\n")
            assert json.loads(read_all(s))["state"] == "running"
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(b"hello there\r\n\r\n")
            assert read_all(s).startswith(b"HTTP/1.1 400 ")
        with socket.create_connection(("127.0.0.1", port), timeout=3) as s:  # a head past 8 KiB: closed at once
            try:
                s.sendall(b"GET /metrics HTTP/1.1\r\n" + b"X-Long: " + b"y" * 9000)
            except OSError:
                pass  # the server may close before all of it is sent
            assert read_all(s) == b""
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        assert 'rankrun_ranks{node_rank="0",state="running"} 2' in body, body
    finally:
        done = job.finish(timeout=60)
    assert done.returncode == 0, done


def test_bad_observe_flags_are_usage_errors(tmp_path):
    r = run(["--events", tmp_path / "missing" / "ev.jsonl", "--no-python", "true"])
    assert r.returncode == 2 and "--events=" in r.stderr and "cannot open it for appending" in r.stderr, r
    for value in ("99999", "abc", ":9400"):
        r = run(["--metrics-port", value, "--no-python", "true"])
        assert r.returncode == 2 and f"--metrics-port={value}" in r.stderr, r
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = run(["--metrics-port", f"127.0.0.1:{port}", "--no-python", "true"])
        assert r.returncode == 2 and f"cannot listen on 127.0.0.1:{port}" in r.stderr and "choose a free port" in r.stderr, r
    r = run(["--metrics-textfile", tmp_path / "nodir" / "x.prom", "--no-python", "true"])
    assert r.returncode == 2 and "is not a writable directory" in r.stderr, r


# --- Prometheus ---------------------------------------------------------------------------------
@pytest.fixture
def prometheus(tmp_path):
    """Debian's prometheus, started by the test on a free port with its own data directory;
    stopped by its pid."""
    binary = shutil.which("prometheus")
    if not binary:
        pytest.skip("prometheus is not installed (make test installs it)")
    procs = []

    def start_server(target):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        config = tmp_path / "prometheus.yml"
        config.write_text("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                          f"scrape_configs:\n  - job_name: rankrun\n    static_configs:\n      - targets: ['{target}']\n")
        p = subprocess.Popen([binary, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                              f"--web.listen-address=127.0.0.1:{port}"], stdout=subprocess.DEVNULL,
                             stderr=open(tmp_path / "prometheus.log", "w"))
        procs.append(p)
        return port

    yield start_server
    for p in procs:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def query(port, expr):
    url = f"http://127.0.0.1:{port}/api/v1/query?query=" + urllib.request.quote(expr)
    try:
        answer = json.loads(urllib.request.urlopen(url, timeout=5).read())
    except OSError:
        return None
    return answer["data"]["result"] if answer.get("status") == "success" else None


def test_prometheus_scrapes_a_running_job_and_promtool_accepts_what_it_serves(tmp_path, prometheus):
    textfile = tmp_path / "rankrun.prom"
    job = start(tmp_path, ["--nproc-per-node", "3", "--metrics-port", "127.0.0.1:0", "--metrics-textfile", textfile,
                           "--no-python", "sleep", "25"])
    try:
        port = metrics_port(job)
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
        check = subprocess.run(["promtool", "check", "metrics"], input=body, capture_output=True, timeout=30)
        assert check.returncode == 0, (check.stdout, check.stderr, body)
        server = prometheus(f"127.0.0.1:{port}")
        deadline = time.monotonic() + 40
        result = None
        while time.monotonic() < deadline:
            result = query(server, 'rankrun_ranks{state="running"}')
            if result:
                break
            time.sleep(0.5)
        assert result and result[0]["value"][1] == "3", (result, (tmp_path / "prometheus.log").read_text()[-2000:])
        up = query(server, "up")
        assert up and up[0]["value"][1] == "1", up
        deadline = time.monotonic() + 15
        while not textfile.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        check = subprocess.run(["promtool", "check", "metrics"], input=textfile.read_bytes(), capture_output=True,
                               timeout=30)
        assert check.returncode == 0, (check.stdout, check.stderr)
        assert 'rankrun_world_size{node_rank="0"} 3' in textfile.read_text()
    finally:
        job.signal(signal.SIGTERM)
        job.finish(timeout=60)


# --- the event log -------------------------------------------------------------------------------
def test_the_event_log_tells_a_crash_and_the_restart(tmp_path):
    log = tmp_path / "events.jsonl"
    script = tmp_path / "crash.py"
    script.write_text("import os, sys, time\n"
                      "if os.environ['TORCHELASTIC_RESTART_COUNT'] == '0' and os.environ['RANK'] == '1':\n"
                      "    time.sleep(0.3); sys.exit(3)\n"
                      "time.sleep(0.5 if os.environ['TORCHELASTIC_RESTART_COUNT'] == '1' else 30)\n")
    r = run(["--nproc-per-node", "2", "--max-restarts", "1", "--events", log, script], timeout=60)
    assert r.returncode == 0, r
    ev = events(log)
    types = [e["type"] for e in ev]
    assert types[0] == "job_started" and types[-1] == "job_ended", types
    assert types.count("attempt_started") == 2 and types.count("worker_started") == 4, types
    crashed = next(e for e in ev if e["type"] == "worker_ended" and e.get("exit_code") == 3)
    assert crashed["rank"] == 1 and crashed["attempt"] == 0 and not crashed["stopped_by_rankrun"], crashed
    stopped = next(e for e in ev if e["type"] == "worker_ended" and e["rank"] == 0 and e["attempt"] == 0)
    assert stopped["signal"] == "SIGTERM" and stopped["stopped_by_rankrun"], stopped
    restart = next(e for e in ev if e["type"] == "restart")
    assert restart["cause"] == "rank failure" and restart["rank"] == 1 and restart["status"] == "exit 3", restart
    assert types.index("restart") > types.index("worker_ended") and restart["restart"] == 1 and restart["of"] == 1
    end = ev[-1]
    assert end["exit_code"] == 0 and end["reason"] == "success" and end["restarts"] == 1, end
    assert [x["result"] for x in end["ranks"]] == ["exit 0", "exit 0"], end
    # in time order
    assert [e["unix"] for e in ev] == sorted(e["unix"] for e in ev)


@torch_only
def test_the_event_log_tells_a_hang(tmp_path):
    log = tmp_path / "events.jsonl"
    r = run(["--nproc-per-node", "2", "--progress-timeout", "10", "--events", log, SCRIPTS / "hang_cases.py", "mismatch"],
            timeout=120)
    assert r.returncode == 124, r
    ev = events(log)
    hang = [e for e in ev if e["type"] == "hang"]
    assert len(hang) == 1 and "different collectives" in hang[0]["report"], ev
    end = ev[-1]
    assert end["type"] == "job_ended" and end["exit_code"] == 124 and end["reason"] == "hang", end


def test_an_event_log_on_a_full_disk_never_holds_the_job_and_says_what_was_lost(tmp_path):
    r = run(["--nproc-per-node", "2", "--events", "/dev/full", "--no-python", "true"], timeout=30)
    assert r.returncode == 0, r
    assert re.search(r"--events=/dev/full: \d+ events could not be written", r.stderr), r


# --- several nodes (network-namespace hosts) --------------------------------------------------------
def start_static_node(rig, tmp_path, host, extra=(), env=None):
    tmp = tmp_path / f"tmp-h{host}"
    tmp.mkdir(exist_ok=True)
    args = [RANKRUN, "--nnodes=3", f"--node-rank={host}", f"--master-addr={rig.host(0).addr}", "--master-port=29500",
            "--nproc-per-node=2", "--node-timeout=3", "--term-timeout=2", *extra, JOB]
    full = {"PYTHON_EXEC": PYTHON, "TMPDIR": str(tmp), "OMP_NUM_THREADS": "1"}
    full.update(env or {})
    proc = rig.host(host).popen(args, env=full)
    proc.tmpdir = tmp
    return proc


@torch_only
def test_status_on_node_1_shows_every_node_s_ranks(hosts, tmp_path):
    rig = hosts(3)
    t0 = time.monotonic()
    go = tmp_path / "go"
    procs = [start_static_node(rig, tmp_path, h, env={"HOLD": "60", "GO_FILE": str(go)}) for h in range(3)]
    for p in procs:
        assert p.wait_for(r"ready rank=", 2, timeout=60), report([p])

    def whole(s):
        return (len(s["ranks"]) == 6 and s["stragglers"] == [0]
                and all(r["in"] == "barrier" for r in s["ranks"] if r["rank"] != 0))

    try:
        s = status_until(procs[1].tmpdir, whole, timeout=40)
        assert s["node_rank"] == 1 and s["nnodes"] == 3 and s["world_size"] == 6, s
        assert [(r["rank"], r["node_rank"], r["local_rank"]) for r in s["ranks"]] == \
            [(0, 0, 0), (1, 0, 1), (2, 1, 0), (3, 1, 1), (4, 2, 0), (5, 2, 1)], s
        assert s["view"] == "the nodes' progress records", s
        # its own ranks with their pids and usage; the others' as their nodes said
        for r in s["ranks"]:
            assert (r["pid"] > 0) == (r["node_rank"] == 1), r
        assert [n["host"] for n in s["nodes"]] == [rig.host(i).addr for i in range(3)], s
        text = status(procs[1].tmpdir)
        assert re.search(rf"^  node 2 +{re.escape(rig.host(2).addr)} +up", text.stdout, re.M), text.stdout
        assert re.search(r"^  4 +0 +2 +- +running +barrier ", text.stdout, re.M), text.stdout
        # node 0, the store host: every node's lease age
        s0 = status_until(procs[0].tmpdir, lambda s: len(s["ranks"]) == 6)
        assert all(n["lease_age_seconds"] is not None and n["lease_age_seconds"] < 10 for n in s0["nodes"]), s0
        # (its own view of the others once their progress came, else the records as on node 1)
        assert s0["view"] in ("node 0", "the nodes' progress records") and s0["store"]["connections"] > 0, s0
    finally:
        go.touch()
        outs = finish_all(procs, timeout=90, since=t0)
    assert all(o.returncode == 0 for o in outs), report(outs)


@torch_only
def test_the_event_log_tells_an_elastic_round_and_a_node_that_joins(hosts, tmp_path):
    rig = hosts(2)
    logs = [tmp_path / f"events-h{h}.jsonl" for h in range(2)]

    go = tmp_path / "go"

    def node(h, hold):
        tmp = tmp_path / f"tmp-h{h}"
        tmp.mkdir(exist_ok=True)
        args = [RANKRUN, "--nnodes=1:2", "--nproc-per-node=1", "--rdzv-backend=c10d",
                f"--rdzv-endpoint={rig.host(0).addr}:29400", "--rdzv-id=obs", "--rdzv-conf=last_call_timeout=1",
                "--node-timeout=3", "--term-timeout=2", f"--events={logs[h]}", JOB]
        return rig.host(h).popen(args, env={"PYTHON_EXEC": PYTHON, "TMPDIR": str(tmp), "OMP_NUM_THREADS": "1",
                                             "HOLD": hold, "GO_FILE": str(go)})

    t0 = time.monotonic()
    first = node(0, "30")
    assert first.wait_for(r"ready rank=0", 1, timeout=60), report([first])
    second = node(1, "1")
    # Round 1 (both nodes) runs: its rank 0 need not hold any more.
    assert second.wait_for(r"ready rank=1", 1, timeout=60), report([first, second])
    go.touch()
    outs = finish_all([first, second], timeout=120, since=t0)
    assert all(o.returncode == 0 for o in outs), report(outs)
    ev = events(logs[0])
    rounds = [e for e in ev if e["type"] == "rendezvous"]
    assert [(e["round"], len(e["nodes"]), e["world_size"]) for e in rounds] == [(0, 1, 1), (1, 2, 2)], rounds
    joined = [e for e in ev if e["type"] == "node_joined"]
    assert len(joined) == 1 and joined[0]["host"] == rig.host(1).addr and joined[0]["round"] == 1, joined
    membership = [e for e in ev if e["type"] == "restart" and e["cause"] == "membership"]
    assert len(membership) == 1 and membership[0]["next_round"] == 1, ev
    assert ev[-1]["type"] == "job_ended" and ev[-1]["exit_code"] == 0, ev[-1]
    late = events(logs[1])
    assert [e["round"] for e in late if e["type"] == "rendezvous"] == [1], late
    assert {e["node"] for e in late if e["type"] == "worker_started"} == {1}, late
