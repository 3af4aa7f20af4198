"""Every benchmark of `make bench` (bench/run.sh), run at a tiny size: a change that breaks one
fails here, long before anyone reruns the figures of docs/benchmarks/. These runs check that
each benchmark works and reports every column, peer included; their numbers mean nothing.
"""
import os
import re
import shutil
import subprocess
import sys

import pytest

from harness import BUILD, ROOT, have_torch

BENCH = ROOT / "bench"
PYTHON = "/usr/bin/python3"  # the benchmarks run with this machine's torch, as make bench does


# Runs a benchmark as pid 1 of a PID namespace of its own (when root): whatever it leaves running
# is listed, fails the run (exit 99), and is killed with the namespace.
CONTAINED = r"""
import os, subprocess, sys, time
rc = subprocess.call(sys.argv[1:])
time.sleep(0.5)
left = []
for pid in filter(str.isdigit, os.listdir("/proc")):
    if int(pid) == os.getpid():
        continue
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            args = f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        continue
    if state != "Z":
        left.append(f"{pid} {args}")
if left:
    print("left running after the benchmark exited:\n" + "\n".join(left), file=sys.stderr)
    sys.exit(99)
sys.exit(rc)
"""


def contained(command):
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return command
    return ["unshare", "--pid", "--fork", "--kill-child", "--mount-proc", PYTHON, "-c", CONTAINED, *command]


def root_with_netns():
    return os.geteuid() == 0 and shutil.which("ip") is not None


# A figure of a table: "12", "0.03" or "12 (9-15)" (a median and its range), negative ones too.
FIGURE = r"-?\d[\d.,]*(?: \(-?[\d.,]+--?[\d.,]+\))?"

# name: (command, what the output must show, why it cannot run or None, seconds allowed)
CASES = {
    "launch": (
        [PYTHON, BENCH / "launch_bench.py", "--build-dir", BUILD, "--runs", "1", "--torchrun-runs", "1", "--workers", "2"],
        [r"\| native \| 2 \| [\d.]+ \| [\d.]+ \|.*\| [\d.]+x \|", r"\| python \| 2 \|.*\| [\d.]+x \|"],
        None if have_torch() else "torchrun (PyTorch) is not importable",
        120,
    ),
    "store": (
        [PYTHON, BENCH / "store_bench.py", "--build-dir", BUILD, "--tiny"],
        [r"\(a\) torch", r"\| add \| 2 \| [\d,]+ \|", r"\(c\) C\+\+ load generator, 16",
         r"\| 256 \| \d[\d,]* \| \d[\d,]* \| \d[\d,]* \|"],
        None if have_torch() else "PyTorch is not importable",
        120,
    ),
    "hosted store": (
        [PYTHON, BENCH / "hosted_store_bench.py", "--build-dir", BUILD, "--clients", "64", "--procs", "2",
         "--rounds", "1"],
        [r"\| 64 \| \d[\d,]* \| \d[\d,]* \| \d[\d,]* \|"],
        None if have_torch() else "PyTorch is not importable",
        120,
    ),
    "multi-node": (
        [PYTHON, BENCH / "multinode_bench.py", "--build-dir", BUILD, "--runs", "1", "--torchrun-runs", "1",
         "--torchrun-fail-runs", "1", "--loss-runs", "1", "--window", "1",
         "--node-timeouts", "3", "--traffic-nodes", "2", "--traffic-sleep", "4",
         # torchrun 1.13 never exits after a failure on another node: capped sooner than the 30 s of make bench
         "--fail-cap", "10"],
        [r"### 1\.", r"### 2\.", r"### 3\.", r"### 4\."],
        None if root_with_netns() and have_torch() else "needs root, ip (network namespaces) and PyTorch",
        400,
    ),
    "scale": (
        [PYTHON, BENCH / "scale_bench.py", "--build-dir", BUILD, "--nodes", "3", "--runs", "1"],
        [r"### Success", r"### Failure", r"### Node lost", r"### Elastic", r"### Node 0's rankrun",
         r"\| 3 \| 1/1 \|"],
        None if root_with_netns() else "needs root and ip (network namespaces)",
        400,
    ),
    "elastic": (
        [PYTHON, BENCH / "elastic_bench.py", "--build-dir", BUILD, "--rankrun", BUILD / "launcher" / "rankrun",
         "--cpp-args", "--sizes 4 --lease-sizes 4 --keeper-sizes 4 --repeat 1 --window 1", "--nodes", "2",
         "--runs", "1", "--traffic-nodes", "2", "--traffic-settle", "1", "--traffic-window", "2"],
        [r"## \(a\)", r"## \(b\)", r"## \(c\)", r"## \(d\)"],
        None if have_torch() else "PyTorch is not importable",
        400,
    ),
    "elastic over etcd": (
        [BUILD / "bench" / "rankrun_elastic_etcd_bench", "--sizes", "4", "--lease-sizes", "4", "--repeat", "1",
         "--window", "1", "--death-runs", "1", "--death-nodes", "3", "--writer-sizes", "8"],
        [r"\| 4 \|", r"\| revoke \| 1 \|", r"\| 8 \| [\d.]+ \|"],
        None if shutil.which("etcd") else "etcd is not installed",
        300,
    ),
    "job view": (
        [BUILD / "bench" / "rankrun_job_view_bench", "--nodes", "2", "--looks", "5"],
        [r"\| 2 x 8 \| \d+ \|"],
        None,
        60,
    ),
    "sampler": (
        [PYTHON, BENCH / "sampler_bench.py", "--build-dir", BUILD, "--runs", "1", "--configs", "off,default",
         "--allreduce-iters", "50", "--ddp-steps", "5", "--window", "0.5"],
        [r"\| DDP step[^|]*\| 1 s \(default\) \| \d+"],
        None if have_torch() else "PyTorch is not importable",
        400,
    ),
    "python runtime": (
        [PYTHON, BENCH / "python_runtime_bench.py", "--build-dir", BUILD, "--tiny"],
        [rf"\| `list\(rankrun\.data\.DistributedSampler\(\.\.\.\)\)` \| {FIGURE} \| [\d.]+x",
         rf"\| `list\(torch\.utils\.data\.DistributedSampler\(\.\.\.\)\)` \| {FIGURE} \|",
         rf"\| plan \(`set_epoch`, `len\(\)`\) \| {FIGURE} \|",
         rf"\| `rankrun\.progress\.step\(\)` \| {FIGURE} \| {FIGURE} \|",
         rf"\| `even_batches\(list\)`[^|]*\| [\d,]+ \| {FIGURE} \| {FIGURE} \|",
         rf"\| `even_batches\(generator\)`[^|]*\| [\d,]+ \| {FIGURE} \| {FIGURE} \|",
         rf"\| `step\(\)` after every step \| {FIGURE} \| [+-][\d.]+% "],
        None if have_torch() else "PyTorch is not importable",
        120,
    ),
}


def test_every_benchmark_of_make_bench_is_covered():
    """bench/run.sh's benchmarks are the ones above: a new one gets a tiny run here too."""
    run_sh = (BENCH / "run.sh").read_text()
    ran = set(re.findall(r"bench/([a-z_]+\.py)|bench/(rankrun_[a-z_]+)\"", run_sh))
    ran = {a or b for a, b in ran}
    covered = set()
    for command, _, _, _ in CASES.values():
        for part in command:
            name = os.path.basename(str(part))
            if name.endswith(".py") or name.startswith("rankrun_"):
                covered.add(name)
                break
    assert ran and ran <= covered, f"benchmarks of bench/run.sh without a tiny run here: {sorted(ran - covered)}"


@pytest.mark.parametrize("name", list(CASES))
def test_benchmark_runs_tiny(name, tmp_path):
    command, expected, cannot, seconds = CASES[name]
    if cannot:
        pytest.skip(cannot)
    env = dict(os.environ, TMPDIR=str(tmp_path))
    proc = subprocess.run(contained([str(c) for c in command]), capture_output=True, text=True, timeout=seconds, env=env,
                          cwd=str(tmp_path), stdin=subprocess.DEVNULL)
    out = proc.stdout
    assert proc.returncode == 0, f"{name}: exit {proc.returncode}\n{out[-3000:]}\n{proc.stderr[-3000:]}"
    missing = [pattern for pattern in expected if not re.search(pattern, out)]
    assert not missing, f"{name}: the output lacks {missing}\n{out[-4000:]}"
