"""--numa-binding on stand-in hardware: this machine has one NUMA node, so each case lays a sysfs
of its own (NUMA nodes, their CPUs' cores and caches, the GPUs' PCI devices) over
/sys/devices/system/node and /sys/bus/pci/devices in a private mount namespace, and the test
suite's scripted NVML (tests/helpers/fake_nvml.c) reports GPUs at those PCI addresses. Every
worker prints its own Cpus_allowed_list from /proc: the CPUs the kernel lets it run on. The
machine's two CPUs, 0 and 1, are all a stand-in node can hold."""
import os
import re
import shutil
import subprocess

import pytest

from harness import BUILD, PYTHON, RANKRUN

FAKE_NVML = BUILD / "tests" / "helpers" / "libfake_nvml.so"
WORKER = "echo \"rank $LOCAL_RANK gpu=$CUDA_VISIBLE_DEVICES cpus=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/$$/status)\""

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None or len(os.sched_getaffinity(0)) < 2,
                                reason="needs root, unshare (a private mount namespace) and two CPUs")


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def machine(tmp_path, nodes, gpus, package=None, llc=None):
    """nodes: {node: "cpulist"}; gpus: [(pci address, node)]; package: {cpu: id} (default 0);
    llc: {cpu: "shared cpulist"} (default the CPU alone). Each CPU is a core of its own."""
    root = tmp_path / "sys"
    for node, cpulist in nodes.items():
        write(root / "node" / f"node{node}" / "cpulist", cpulist)
        cpus = [int(c) for part in cpulist.split(",") for c in
                (range(int(part.split("-")[0]), int(part.split("-")[-1]) + 1))]
        for cpu in cpus:
            cpu_dir = root / "node" / f"node{node}" / f"cpu{cpu}"
            write(cpu_dir / "topology" / "physical_package_id", str((package or {}).get(cpu, 0)))
            write(cpu_dir / "topology" / "thread_siblings_list", str(cpu))
            cache = cpu_dir / "cache" / "index3"
            write(cache / "level", "3")
            write(cache / "type", "Unified")
            write(cache / "shared_cpu_list", (llc or {}).get(cpu, str(cpu)))
    write(root / "node" / "possible", ",".join(str(n) for n in nodes))
    lines = []
    for index, (address, node) in enumerate(gpus):
        write(root / "pci" / address / "numa_node", str(node))
        lines.append(f"gpu {index} uuid=GPU-{index:04d} pci={address}")
    (root / "pci").mkdir(parents=True, exist_ok=True)
    nvml = tmp_path / "nvml"
    nvml.write_text("\n".join(lines) + "\n")
    return root, nvml


def launch(root, nvml, args, taskset=None, nvml_library=FAKE_NVML):
    inner = " ".join([*(["taskset", "-c", taskset] if taskset else []), str(RANKRUN), *args,
                      "--no-python", "sh", "-c", f"'{WORKER}'"])
    script = (f"mount --bind {root / 'node'} /sys/devices/system/node && "
              f"mount --bind {root / 'pci'} /sys/bus/pci/devices && exec {inner}")
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES", "RANK", "LOCAL_RANK")}
    env.update(RANKRUN_NVML_LIBRARY=str(nvml_library), RANKRUN_FAKE_NVML=str(nvml), PYTHON_EXEC=str(PYTHON))
    r = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script], capture_output=True,
                       text=True, env=env, timeout=120)
    if "mount:" in r.stderr and "rankrun" not in r.stderr:
        pytest.skip(f"cannot lay a sysfs over /sys here: {r.stderr.strip()}")
    return r


def cpus_of(r):
    found = dict(re.findall(r"rank (\d+) gpu=\S* cpus=(\S+)", r.stdout))
    return {int(k): v for k, v in found.items()}


TWO_NODES = {0: "0", 1: "1"}
TWO_GPUS = [("0000:01:00.0", 0), ("0000:02:00.0", 1)]


def test_node_each_worker_on_its_gpus_node(tmp_path):
    root, nvml = machine(tmp_path, TWO_NODES, TWO_GPUS)
    r = launch(root, nvml, ["-v", "--nproc-per-node", "2", "--numa-binding", "node"])
    assert r.returncode == 0, r.stderr
    assert cpus_of(r) == {0: "0", 1: "1"}, r.stdout + r.stderr
    assert "local rank 1 (GPU 1, NUMA node 1) runs on CPUs 1" in r.stderr, r.stderr


@pytest.mark.parametrize("gpus", ["1,0", "GPU-0001,GPU-0000"])
def test_node_follows_the_gpu_really_given_not_the_local_rank(tmp_path, gpus):
    """torch assumes local rank N has GPU N; with --gpus out of order each worker still runs on
    its own GPU's node, by index or by UUID."""
    root, nvml = machine(tmp_path, TWO_NODES, TWO_GPUS)
    r = launch(root, nvml, ["--nproc-per-node", "2", "--gpus", gpus, "--numa_binding=node"])
    assert r.returncode == 0, r.stderr
    assert cpus_of(r) == {0: "1", 1: "0"}, r.stdout + r.stderr


def test_socket_takes_every_node_of_the_socket(tmp_path):
    root, nvml = machine(tmp_path, TWO_NODES, TWO_GPUS)  # both nodes on package 0
    r = launch(root, nvml, ["--nproc-per-node", "2", "--numa-binding", "socket"])
    assert r.returncode == 0, r.stderr
    assert cpus_of(r) == {0: "0-1", 1: "0-1"}, r.stdout + r.stderr
    root, nvml = machine(tmp_path / "b", TWO_NODES, TWO_GPUS, package={0: 0, 1: 1})
    r = launch(root, nvml, ["--nproc-per-node", "2", "--numa-binding", "socket"])
    assert cpus_of(r) == {0: "0", 1: "1"}, r.stdout + r.stderr


def test_exclusive_splits_the_nodes_cores(tmp_path):
    root, nvml = machine(tmp_path, {0: "0-1"}, [("0000:01:00.0", 0), ("0000:02:00.0", 0), ("0000:03:00.0", 0)])
    r = launch(root, nvml, ["--nproc-per-node", "2", "--numa-binding", "exclusive"])
    assert r.returncode == 0, r.stderr
    assert cpus_of(r) == {0: "0", 1: "1"}, r.stdout + r.stderr
    # three workers, two cores: refused before anything starts
    r = launch(root, nvml, ["--nproc-per-node", "3", "--numa-binding", "exclusive"])
    assert r.returncode == 2, r.stderr
    assert "3 workers have GPUs on NUMA node 0 (CPUs 0-1), which has 2 physical cores" in r.stderr, r.stderr
    assert "rank 0" not in r.stdout


def test_core_complex_one_last_level_cache_each(tmp_path):
    root, nvml = machine(tmp_path, {0: "0-1"}, [("0000:01:00.0", 0), ("0000:02:00.0", 0)])
    r = launch(root, nvml, ["--nproc-per-node", "2", "--numa-binding", "core-complex"])
    assert r.returncode == 0, r.stderr
    assert cpus_of(r) == {0: "0", 1: "1"}, r.stdout + r.stderr
    root, nvml = machine(tmp_path / "b", {0: "0-1"}, [("0000:01:00.0", 0), ("0000:02:00.0", 0)],
                         llc={0: "0-1", 1: "0-1"})
    r = launch(root, nvml, ["--nproc-per-node", "2", "--numa-binding", "core-complex"])
    assert cpus_of(r) == {0: "0-1", 1: "0-1"}, r.stdout + r.stderr


def test_a_cpuset_narrower_than_the_node(tmp_path):
    root, nvml = machine(tmp_path, {0: "0-1"}, [("0000:01:00.0", 0), ("0000:02:00.0", 0)])
    r = launch(root, nvml, ["--nproc-per-node", "2", "--numa-binding", "node"], taskset="1")
    assert r.returncode == 0, r.stderr
    assert cpus_of(r) == {0: "1", 1: "1"}, r.stdout + r.stderr
    # a node with none of rankrun's CPUs: refused, naming the node and the CPUs
    root, nvml = machine(tmp_path / "b", TWO_NODES, TWO_GPUS)
    r = launch(root, nvml, ["--nproc-per-node", "2", "--numa-binding", "node"], taskset="0")
    assert r.returncode == 2, r.stderr
    assert "local rank 1's GPU is on NUMA node 1 (CPUs 1), and rankrun may use none of them" in r.stderr, r.stderr


def test_without_gpus_it_says_so_and_binds_nothing(tmp_path):
    root, nvml = machine(tmp_path, TWO_NODES, TWO_GPUS)
    r = launch(root, nvml, ["--nproc-per-node", "2", "--numa-binding", "node"],
               nvml_library=tmp_path / "no-such-nvml.so")
    assert r.returncode == 0, r.stderr
    assert "--numa-binding=node: this node has no GPUs to place the workers by; no worker is bound" in r.stderr, r.stderr
    assert cpus_of(r) == {0: "0-1", 1: "0-1"}, r.stdout + r.stderr


def test_preferred_memory_where_the_kernel_takes_it_cpus_only_where_not(tmp_path):
    """The kernel here has node 0 only: a preferred policy for node 0 is taken, one for the
    stand-in node 1 is refused, and that worker is bound by its CPUs alone, with a warning."""
    root, nvml = machine(tmp_path, TWO_NODES, TWO_GPUS)
    policy = ("import ctypes, os; libc = ctypes.CDLL(None, use_errno=True); mode = ctypes.c_int(); "
              "mask = (ctypes.c_ulong * 16)(); libc.syscall(239, ctypes.byref(mode), mask, 1024, 0, 0); "
              "print('rank', os.environ['LOCAL_RANK'], 'policy', mode.value, 'mask', mask[0], flush=True)")
    script = tmp_path / "policy.py"
    script.write_text(policy + "\n")
    inner = f"{RANKRUN} --nproc-per-node 2 --numa-binding node --numa-memory preferred {script}"
    cmd = (f"mount --bind {root / 'node'} /sys/devices/system/node && "
           f"mount --bind {root / 'pci'} /sys/bus/pci/devices && exec {inner}")
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES",)}
    env.update(RANKRUN_NVML_LIBRARY=str(FAKE_NVML), RANKRUN_FAKE_NVML=str(nvml), PYTHON_EXEC=str(PYTHON))
    r = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", cmd], capture_output=True,
                       text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "rank 0 policy 1 mask 1" in r.stdout, r.stdout + r.stderr  # MPOL_PREFERRED, node 0
    assert "rank 1 policy 0 mask 0" in r.stdout, r.stdout + r.stderr  # the default: refused for node 1
    assert "--numa-memory=preferred: the kernel refuses a memory policy for NUMA node 1 here" in r.stderr, r.stderr


def test_check_shows_each_workers_cpus(tmp_path):
    root, nvml = machine(tmp_path, TWO_NODES, TWO_GPUS)
    r = launch(root, nvml, ["--nproc-per-node", "2", "--gpus", "1,0", "--numa-binding", "node", "--check"])
    assert "local rank 0 (GPU 1, NUMA node 1) runs on CPUs 1" in r.stdout + r.stderr, r.stdout + r.stderr
    assert "local rank 1 (GPU 0, NUMA node 0) runs on CPUs 0" in r.stdout + r.stderr, r.stdout + r.stderr
