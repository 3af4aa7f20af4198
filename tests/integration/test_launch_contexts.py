"""The launchers' pod contracts, replayed (rankrun's side: docs/launch-contexts.md), as the
operators' sources write them (Kubeflow Training Operator v1.9 envvar.go and elastic.go and its
v1 SDK, Trainer v2's torch plugin, TorchX's dist.ddp on its Kubernetes scheduler with Volcano's
svc plugin). Each pod is a network-namespace host of the rig (netns.py) with a UTS namespace of
its own (its hostname is the pod's name) and a hosts file naming every pod of the job, as the
operator's headless Services make them resolvable. Each pod's rankrun starts from an empty environment
(`env -i`) with exactly the variables the operator writes, and the command line as the pod's
container runs it:

- Kubeflow Training Operator v1, static PyTorchJob `pj` (Master x1 + Worker x1, nprocPerNode "2"):
  `rankrun worker.py` with the node-describing RANK/WORLD_SIZE/MASTER_* the workers must not
  inherit; nprocPerNode `auto` on a CPU pod; the v1 SDK's `bash -c` that writes the script and
  runs bare `torchrun` (rankrun installed under that name).
- Kubeflow v1 elastic PyTorchJob `pje` (Worker x2, c10d, 1:3): an identical environment on every
  pod, the identity only in the hostname; then a third pod joins and every node restarts at
  world 6 without counting a restart. An empty PET_STANDALONE (what `standalone: true` emits) is
  taken as not given, with a warning naming it.
- Kubeflow Trainer v2 TrainJob `tj` (numNodes 2, cpu 2): PET_* only, `torchrun worker.py`.
- TorchX dist.ddp on Volcano: `bash -c "torchrun --rdzv_backend c10d --rdzv_endpoint
  ${TORCHX_RANK0_HOST:=localhost}:29500 ... --tee 3 --role '' worker.py"`, `localhost` on
  replica 0 and Volcano's DNS name on replica 1.

Every worker (scripts/pod_worker.py) prints what it got as one JSON line, then joins the gloo
group through the store (env://) and all_reduces a 1, so the contract is proven end to end. Every
rankrun must end 0, and the rig's teardown fails a test that leaves a process in a namespace."""
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from harness import PYTHON, RANKRUN, SCRIPTS, TORCH_TESTS
from netns import finish_all, hosts, report, snapshot  # noqa: F401  (hosts is the fixture)

pytestmark = TORCH_TESTS

WORKER = SCRIPTS / "pod_worker.py"
# A Debian image's PATH; the test's bin directory (rankrun, and rankrun as `torchrun`) goes first.
IMAGE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
RECORD = re.compile(r"^(?P<prefix>.*?)(?P<kind>pod-env|pod-sum|pod-wait|pod-done) (?P<json>\{.*\})$")
WARNING = re.compile(r"^rankrun: warning: ", re.M)
UNREACHABLE = r"^rankrun: warning: cannot reach the store host "
JOB_TIMEOUT = 60  # a job of 2 nodes x 2 workers takes ~10 s here (2 cores, 2 tests at once)


# --- pods ------------------------------------------------------------------------------------
class Pods:
    """The rig's hosts as the pods of one job: host i is pod names[i] (its hostname); every
    namespace's /etc/hosts names every pod (`entries(i)`: the names host i's address answers to),
    as the operator's headless Services make them resolvable."""

    def __init__(self, rig, tmp_path, names, entries=None):
        self.rig, self.tmp_path, self.names = rig, tmp_path, list(names)
        # Else `torchrun` on PATH would be Debian's (/usr/bin/torchrun), as in an image with torch.
        assert os.access(RANKRUN, os.X_OK), f"{RANKRUN} is not executable (not built, or being linked)"
        self.bin = tmp_path / "bin"
        self.bin.mkdir(exist_ok=True)
        for name in ("rankrun", "torchrun"):  # the image's install: rankrun, and rankrun as torchrun
            link = self.bin / name
            if not link.exists():
                link.symlink_to(RANKRUN)
        entries = entries or (lambda i: [self.names[i]])
        lines = [f"{rig.host(i).addr}\t{' '.join(entries(i))}" for i in range(len(self.names))]
        for i in range(len(self.names)):
            rig.host(i).hosts_file(lines)

    def start(self, i, operator_env, argv):
        """Pod i's container: `env -i` + PATH + the operator's variables + what the rig needs, then
        argv. Returns the Proc (with .pod, .tmpdir)."""
        tmp = self.tmp_path / f"tmp-{self.names[i]}"
        tmp.mkdir(exist_ok=True)
        env = {
            "PATH": f"{self.bin}:{IMAGE_PATH}",
            # The interpreter with torch (in an image, python3 on PATH is the one).
            "PYTHON_EXEC": PYTHON,
            # The pod's own /tmp: the namespaces share this machine's file system, so each pod
            # gets a directory of its own, where rankrun's run directory and the SDK's mktemp go.
            "TMPDIR": str(tmp),
        }
        if "RANKRUN_TORCH_ROOT" in os.environ:  # tests/helpers/torch-python (another torch) reads it
            env["RANKRUN_TORCH_ROOT"] = os.environ["RANKRUN_TORCH_ROOT"]
        # No GLOO_SOCKET_IFNAME: like a real pod, each host has one interface (eth0) besides lo, and
        # gloo finds it from the hostname, which the pod's hosts file resolves to eth0's address.
        env.update(operator_env)
        args = ["env", "-i", *(f"{k}={v}" for k, v in env.items()), *argv]
        proc = self.rig.host(i).popen(args, hostname=self.names[i])
        proc.pod, proc.tmpdir = self.names[i], tmp
        return proc


def records(text, kind):
    """[(console prefix, fields)] of the workers' `kind` lines in a node's stdout."""
    found = []
    for line in text.splitlines():
        m = RECORD.match(line)
        if m and m.group("kind") == kind:
            found.append((m.group("prefix"), json.loads(m.group("json"))))
    return found


def envs_at(o, world):
    return [f for _, f in records(o.stdout, "pod-env") if f["WORLD_SIZE"] == str(world)]


def check_job(outs, names, *, world, nproc, master_addr=None, master_port=None, role="default", run_id="none",
              restarts="0", max_restarts="0", group_ranks=None, done=True):
    """Every node's workers of the round at `world`: torchrun's environment, the ordering rule
    RANK = GROUP_RANK x nproc + LOCAL_RANK with each rank once, one MASTER_ADDR:MASTER_PORT that
    every pod resolves, and the all_reduce summing to the world size. master_addr/master_port:
    the expected values (None: whatever rankrun gives, the same for all). group_ranks: each
    node's expected GROUP_RANK (None: any order, each once). Every worker line also carries
    rankrun's console prefix, `[<pod address>:<rank>] ` (docs/multi-node.md), so a torchrun that
    ran in rankrun's place would not pass. Returns {pod: GROUP_RANK}."""
    why = report(outs)
    ranks, groups, masters, resolved = [], {}, set(), set()
    for o, name in zip(outs, names):
        for prefix, f in records(o.stdout, "pod-env"):  # rankrun's console prefix (docs/multi-node.md)
            assert prefix == f"[{o.addr}:{f['RANK']}] ", f"{name}: prefix {prefix!r} for {f}\n" + why
        envs = envs_at(o, world)
        assert len(envs) == nproc, f"{name}: {len(envs)} workers at world {world}, not {nproc}\n" + why
        assert sorted(int(f["LOCAL_RANK"]) for f in envs) == list(range(nproc)), f"{name}: LOCAL_RANKs\n" + why
        node_groups = {f["GROUP_RANK"] for f in envs}
        assert len(node_groups) == 1, f"{name}: GROUP_RANKs {node_groups} on one node\n" + why
        groups[name] = int(node_groups.pop())
        for f in envs:
            where = f"{name} rank {f['RANK']}: {f}\n"
            assert f["hostname"] == name, where + why
            assert f["WORLD_SIZE"] == str(world) and f["LOCAL_WORLD_SIZE"] == str(nproc), where + why
            assert f["GROUP_WORLD_SIZE"] == str(len(outs)), where + why
            assert int(f["RANK"]) == groups[name] * nproc + int(f["LOCAL_RANK"]), where + why
            assert f["ROLE_NAME"] == role, where + why
            assert f["ROLE_RANK"] == f["RANK"] and f["ROLE_WORLD_SIZE"] == str(world), where + why
            assert f["TORCHELASTIC_RUN_ID"] == run_id, where + why
            assert f["TORCHELASTIC_RESTART_COUNT"] == restarts, where + why
            assert f["TORCHELASTIC_MAX_RESTARTS"] == max_restarts, where + why
            if master_addr is not None:
                assert f["MASTER_ADDR"] == master_addr, where + why
            if master_port is not None:
                assert f["MASTER_PORT"] == str(master_port), where + why
            addrs = f["master_addr_resolves_to"]
            assert isinstance(addrs, list) and addrs, f"{name}: MASTER_ADDR does not resolve: {where}" + why
            masters.add((f["MASTER_ADDR"], f["MASTER_PORT"]))
            resolved.add(tuple(addrs))
            ranks.append(int(f["RANK"]))
        sums = [f for _, f in records(o.stdout, "pod-sum") if f["WORLD_SIZE"] == str(world)]
        assert len(sums) == nproc and all(f["sum"] == world for f in sums), f"{name}: all_reduce\n" + why
        assert all(f["torch_rank"] == int(f["RANK"]) and f["torch_world"] == world for f in sums), why
        if done:
            finished = [f for _, f in records(o.stdout, "pod-done") if f["WORLD_SIZE"] == str(world)]
            assert len(finished) == nproc, f"{name}: not every worker finished\n" + why
    assert sorted(ranks) == list(range(world)), f"ranks {sorted(ranks)} at world {world}\n" + why
    assert sorted(groups.values()) == list(range(len(outs))), f"GROUP_RANKs {groups}\n" + why
    if group_ranks is not None:
        assert groups == dict(zip(names, group_ranks)), f"GROUP_RANKs {groups}\n" + why
    assert len(masters) == 1, f"the workers disagree on MASTER_ADDR:MASTER_PORT: {masters}\n" + why
    assert len(resolved) == 1, f"MASTER_ADDR resolves differently on the pods: {resolved}\n" + why
    return groups


def assert_ok(outs):
    for o in outs:
        assert o.returncode == 0, report(outs)


def assert_no_run_dir(outs):
    """rankrun leaves nothing in the pod's TMPDIR (the v1 SDK's own mktemp directory aside)."""
    for o in outs:
        left = [p.name for p in o.tmpdir.iterdir() if not p.name.startswith("tmp.")]
        assert left == [], f"host {o.host} left {left} in its TMPDIR\n" + report(outs)


def listening(procs):
    """What listens on TCP in each pod (ss), for a failure's message."""
    parts = []
    for p in procs:
        r = subprocess.run(["ip", "netns", "exec", p.host.ns, "ss", "-Hltn"], capture_output=True, text=True,
                           timeout=10)
        socks = sorted({line.split()[3] for line in r.stdout.splitlines() if len(line.split()) > 3})
        parts.append(f"{p.pod} ({p.host.addr}) listens on: {', '.join(socks) or 'nothing'}\n")
    return "".join(parts)


def stop(procs):
    """SIGTERM the pods' rankruns that still run (they stop their workers), SIGKILL after 15 s."""
    for p in procs:
        if p.poll() is None:
            p.signal(signal.SIGTERM)
    for p in procs:
        if p.wait(15) is None:
            p.signal(signal.SIGKILL)
            p.wait(5)


def run_job(procs, timeout=JOB_TIMEOUT):
    """Every pod's rankrun to its end: their Outputs (as finish_all's). Fails at once, stopping
    every pod, when one reports the store host unreachable a third time (the first try and two
    retries, 20 s: a job here reaches its store within a second or never), when one has ended
    with an error and another still runs 15 s later (a pod that fails before it joins leaves the
    others waiting for it), or after `timeout`."""
    since = min(p.started for p in procs)
    deadline = time.monotonic() + timeout
    failed_at = None
    why = None
    while any(p.poll() is None for p in procs):
        now = time.monotonic()
        if failed_at is None and any(p.poll() not in (None, 0) for p in procs):
            failed_at = now
        if any(p.count(UNREACHABLE, stream="err") >= 3 for p in procs):
            why = "a pod cannot reach the store host\n" + listening(procs)
        elif failed_at is not None and now - failed_at > 15:
            why = "a pod's rankrun failed and the others still run 15 s later\n"
        elif now > deadline:
            why = f"the pods did not finish in {timeout}s\n"
        if why:
            stop(procs)
            pytest.fail(why + "(stopped)\n" + report([snapshot(p, since) for p in procs]))
        time.sleep(0.1)
    return finish_all(procs, timeout=5, since=since)


def attach(outs, procs):
    for o, p in zip(outs, procs):
        o.tmpdir = p.tmpdir
    return outs


# --- Kubeflow Training Operator v1: static PyTorchJob ----------------------------------------
PJ = ["pj-master-0", "pj-worker-0"]


def pj_env(node, nproc="2", world="4"):
    """setPodEnv's variables for pod `node` (0: the master) of `pj`, 1 master + 1 worker (§2.1, §5.1)."""
    return {
        "PYTHONUNBUFFERED": "1",
        "MASTER_PORT": "23456", "PET_MASTER_PORT": "23456",
        "MASTER_ADDR": "pj-master-0", "PET_MASTER_ADDR": "pj-master-0",
        "WORLD_SIZE": world,
        "RANK": str(node), "PET_NODE_RANK": str(node),
        "PET_NPROC_PER_NODE": nproc,
        "PET_NNODES": "2",
    }


def sdk_command(script):
    """The v1 SDK's container command (create_job(train_func=...)): a bash script that writes the
    function's code through an unquoted here-document to $program_path/ephemeral_script.py and
    runs bare torchrun on it."""
    code = Path(script).read_text()
    assert not re.search(r"[$`\\]", code), "an unquoted here-document would expand this script"
    return ["bash", "-c",
            "program_path=$(mktemp -d)\n"
            "read -r -d '' SCRIPT << EOM\n"
            f"{code}\n"
            "EOM\n"
            'printf "%s" "$SCRIPT" > "$program_path/ephemeral_script.py"\n'
            'torchrun "$program_path/ephemeral_script.py"']


@pytest.mark.parametrize("variant", ["rankrun", "auto", "sdk"])
def test_kubeflow_v1_static_pytorchjob(hosts, tmp_path, variant):
    """pj-master-0 and pj-worker-0 with setPodEnv's environment: RANK=1 and WORLD_SIZE=4 (nodes,
    not processes) on the worker's pod must be replaced, so its workers are ranks 2 and 3; the
    master's rankrun hosts the store on pj-master-0:23456. `auto`: PET_NPROC_PER_NODE=auto, the
    pod's WORLD_SIZE=2 (the node count); on a CPU pod rankrun starts one worker per online CPU
    (docs/options.md: GPUs if any, else CPUs; torchrun: os.cpu_count()), so the workers see 2 x
    that. `sdk`: the v1 SDK's bash -c running bare `torchrun`."""
    nproc = 2
    if variant == "auto":
        if Path("/dev/nvidiactl").exists():
            pytest.skip("auto counts this machine's GPUs; this case replays a CPU pod")
        nproc = os.sysconf("SC_NPROCESSORS_ONLN")
        if nproc > 8:
            pytest.skip(f"auto would start {nproc} workers per pod here: too long a job for make test")
    rig = hosts(2)
    pods = Pods(rig, tmp_path, PJ)
    argv = sdk_command(WORKER) if variant == "sdk" else ["rankrun", WORKER]
    env = (lambda n: pj_env(n, nproc="auto", world="2")) if variant == "auto" else pj_env
    procs = [pods.start(n, env(n), argv) for n in range(2)]
    outs = attach(run_job(procs), procs)
    assert_ok(outs)
    check_job(outs, PJ, world=2 * nproc, nproc=nproc, master_addr="pj-master-0", master_port=23456,
              group_ranks=[0, 1])
    assert_no_run_dir(outs)


# --- Kubeflow Training Operator v1: elastic PyTorchJob ---------------------------------------
PJE = ["pje-worker-0", "pje-worker-1", "pje-worker-2"]
PJE_ENV = {  # elastic.go's variables, the same on every pod (§2.2, §5.2)
    "PYTHONUNBUFFERED": "1",
    "PET_NPROC_PER_NODE": "2",
    "PET_RDZV_ENDPOINT": "pje-worker-0:23456",
    "PET_RDZV_BACKEND": "c10d",
    "PET_NNODES": "1:3",
    "PET_MAX_RESTARTS": "3",
    "PET_RDZV_CONF": "last_call_timeout=2",  # elasticPolicy.rdzvConf: the round closes 2 s after MIN
}


def wait_records(procs, pattern, count, timeout):
    deadline = time.monotonic() + timeout
    for p in procs:
        if not p.wait_for(pattern, count, timeout=max(0.0, deadline - time.monotonic())):
            now = time.monotonic()
            for q in procs:
                q.poll()
            pytest.fail(f"{p.pod}: not {count} lines matching {pattern!r} in {timeout}s\n"
                        + report([snapshot(q, now) for q in procs]))


def test_kubeflow_v1_elastic_pytorchjob_and_a_third_pod_joins(hosts, tmp_path):
    """pje-worker-0 and -1 with the same environment: one round of 2 nodes, world 4, ranks by the
    ordering rule (not "the store host is rank 0"), TORCHELASTIC_MAX_RESTARTS 3, RESTART_COUNT 0,
    a MASTER_ADDR both pods resolve. Then pje-worker-2 starts with the same environment: every
    node restarts at world 6 (room under MAX 3), RESTART_COUNT still 0, and every rankrun ends 0.
    The world-4 workers wait (pod_worker.py --until-world 6) until the membership change stops
    them; the world-6 ones finish."""
    rig = hosts(3)
    pods = Pods(rig, tmp_path, PJE)
    argv = ["rankrun", WORKER, "--until-world", "6"]
    first = [pods.start(n, PJE_ENV, argv) for n in range(2)]
    try:
        wait_records(first, r'^.*pod-wait .*"WORLD_SIZE": "4"', 2, timeout=JOB_TIMEOUT)
        now = time.monotonic()
        outs = attach([snapshot(p, now) for p in first], first)
        check_job(outs, PJE[:2], world=4, nproc=2, max_restarts="3", done=False)
    except BaseException:
        stop(first)
        raise

    third = pods.start(2, PJE_ENV, argv)
    procs = first + [third]
    outs = attach(run_job(procs), procs)
    assert_ok(outs)
    check_job(outs, PJE, world=6, nproc=2, max_restarts="3")
    for o in outs[:2]:
        assert [f for _, f in records(o.stdout, "pod-done") if f["WORLD_SIZE"] != "6"] == [], report(outs)
    assert_no_run_dir(outs)


def test_kubeflow_v1_elastic_empty_pet_standalone_is_not_given(hosts, tmp_path):
    """`standalone: true` emits PET_STANDALONE= (empty; torchrun's check_env raises on it). rankrun
    takes a present but empty PET_* as not given, with a warning naming it: the job runs as the
    elastic job of two pods (not two standalone jobs: the run id stays `none`, world 4)."""
    rig = hosts(2)
    pods = Pods(rig, tmp_path, PJE[:2])
    env = dict(PJE_ENV, PET_STANDALONE="")
    procs = [pods.start(n, env, ["rankrun", WORKER, "--until-world", "4"]) for n in range(2)]
    outs = attach(run_job(procs), procs)
    assert_ok(outs)
    check_job(outs, PJE[:2], world=4, nproc=2, max_restarts="3")
    for o in outs:
        warned = [l for l in o.stderr.splitlines() if WARNING.match(l) and "PET_STANDALONE" in l]
        assert warned, f"host {o.host}: no warning names PET_STANDALONE\n" + report(outs)
    assert_no_run_dir(outs)


# --- Kubeflow Trainer v2: TrainJob with the torch MLPolicy -----------------------------------
TJ = ["tj-node-0-0", "tj-node-0-1"]


def test_trainer_v2_trainjob(hosts, tmp_path):
    """tj-node-0-0 and tj-node-0-1 (subdomain tj), torch.go's PET_* and the Job controller's
    JOB_COMPLETION_INDEX, `torchrun worker.py`: static, node 0 hosts the store at
    tj-node-0-0.tj:29500; ranks as for the v1 static job."""
    rig = hosts(2)
    pods = Pods(rig, tmp_path, TJ, entries=lambda i: [f"{TJ[i]}.tj", TJ[i]])

    def env(n):
        return {"PET_NNODES": "2", "PET_NPROC_PER_NODE": "2", "PET_NODE_RANK": str(n), "JOB_COMPLETION_INDEX": str(n),
                "PET_MASTER_ADDR": "tj-node-0-0.tj", "PET_MASTER_PORT": "29500"}

    procs = [pods.start(n, env(n), ["torchrun", WORKER]) for n in range(2)]
    outs = attach(run_job(procs), procs)
    assert_ok(outs)
    check_job(outs, TJ, world=4, nproc=2, master_addr="tj-node-0-0.tj", master_port=29500, group_ranks=[0, 1])
    assert_no_run_dir(outs)


# --- TorchX dist.ddp on its Kubernetes scheduler (Volcano) -----------------------------------
APP = "app-x"
TX = [f"{APP}-train-0-0", f"{APP}-train-1-0"]


def torchx_command(host_var):
    """dist.ddp's pod argv (`bash -c "<cmd>"`), the endpoint's variable named per replica."""
    return ["bash", "-c",
            f"torchrun --rdzv_backend c10d --rdzv_endpoint ${{{host_var}:=localhost}}:29500 --rdzv_id '{APP}' "
            f"--nnodes 2 --nproc_per_node 2 --tee 3 --role '' {WORKER}"]


def test_torchx_dist_ddp(hosts, tmp_path):
    """Replica 0 reaches the endpoint as localhost (TORCHX_RANK0_HOST=localhost), replica 1 as
    app-x-train-0-0.app-x (Volcano's VC_TRAIN_0_HOSTS), so the store must be on every interface of
    replica 0. `--role ''` is an explicit empty role: ROLE_NAME "". rankrun's console prefix is
    its own (docs/output.md, docs/multi-node.md: `[host:rank] ` on several nodes, whatever the
    role; torchrun's --tee prefix would read `[0]:`), and --tee 3 also writes each stream to the
    run's log files."""
    rig = hosts(2)
    pods = Pods(rig, tmp_path, TX, entries=lambda i: [f"{TX[i]}.{APP}", TX[i]])
    volcano = {"VC_TRAIN_0_HOSTS": f"{TX[0]}.{APP}", "VC_TRAIN_0_NUM": "1",  # svc plugin: every task, every pod
               "VC_TRAIN_1_HOSTS": f"{TX[1]}.{APP}", "VC_TRAIN_1_NUM": "1"}
    component = {"LOGLEVEL": "WARNING"}
    envs = [dict(component, **volcano, TORCHX_RANK0_HOST="localhost"), dict(component, **volcano)]
    argvs = [torchx_command("TORCHX_RANK0_HOST"), torchx_command("VC_TRAIN_0_HOSTS")]
    procs = [pods.start(n, envs[n], argvs[n]) for n in range(2)]
    outs = attach(run_job(procs), procs)
    assert_ok(outs)
    check_job(outs, TX, world=4, nproc=2, role="", run_id=APP, group_ranks=[0, 1])
    for o, name in zip(outs, TX):
        # --tee 3: each local rank's stdout also in <run dir>/.../attempt_0/<local rank>/stdout.log
        logs = sorted(o.tmpdir.rglob("attempt_0/*/stdout.log"))
        assert len(logs) == 2, f"{name}: tee files {logs}\n" + report(outs)
        for log in logs:
            assert "pod-env {" in log.read_text(), f"{log}: {log.read_text()!r}"
