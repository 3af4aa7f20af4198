"""What `make wheel` and `make dist` leave in dist/, installed as a user installs them.

- The programs need no shared library beyond glibc's and no glibc newer than 2.28
  (readelf, objdump), and the wheel's platform tag is the floor its files really have.
- The wheel, installed with `pip install --no-index` into a new venv without the system's
  packages: rankrun from the venv's PATH runs a torch job (gloo), `python -m rankrun` passes the
  arguments and the exit code; a C++ trainer built against the runtime found there gets NCCL from
  the venv (stand-in libraries where torch's nvidia-* wheels put them); into a venv over Debian's python3 and its torch: that venv's
  rankrun, run by its path with no venv active and a python3 without torch first on PATH (and as
  a link named torchrun), runs that venv's Python; `python -m rankrun` runs its own interpreter;
  PYTHON_EXEC wins over both, and examples/external_consumer builds against the runtime found
  in the venv (CMake and pkg-config) and runs as a two-rank job under that rankrun.
- The tarball's rankrun, copied alone into a Debian bullseye root (glibc 2.31, made and cached
  by tools/torch-root.sh bullseye), runs a multi-worker job of Python workers there; the whole
  tarball there gives its Python 3.9 workers rankrun.data and rankrun.progress (its own
  librankrun_worker), as the wheel's rankrun gives a venv's workers, and the wheel gives a venv
  without torch outside any job.

Needs the release build's output ($RANKRUN_DIST_DIR, default dist/); skipped, with the reason,
where it is missing. `make test` makes it first, so nothing here is skipped there.
"""
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DIST = Path(os.environ.get("RANKRUN_DIST_DIR", ROOT / "dist"))
SCRIPTS = Path(__file__).resolve().parent / "scripts"
CONSUMER = ROOT / "examples" / "external_consumer"
HELPERS = ROOT / "tests" / "helpers"
GLIBC_LIBRARIES = {"libc.so.6", "libm.so.6", "libpthread.so.0", "libdl.so.2", "librt.so.1", "ld-linux-x86-64.so.2"}
# The job's variables of an outer rankrun must not reach the jobs started here.
JOB_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "GROUP_RANK",
            "TORCHELASTIC_ERROR_FILE", "CMAKE_PREFIX_PATH", "PKG_CONFIG_PATH", "VIRTUAL_ENV", "PYTHONPATH",
            "CUDA_VISIBLE_DEVICES")


def project_version():
    m = re.search(r"project\(\s*rankrun\s+VERSION\s+([0-9.]+)", (ROOT / "CMakeLists.txt").read_text())
    assert m, "project(rankrun VERSION x.y.z) not found in CMakeLists.txt"
    return m.group(1)


VERSION = project_version()
WHEELS = sorted(DIST.glob(f"rankrun-{VERSION}-py3-none-manylinux_*_x86_64.whl"))
TARBALL = DIST / f"rankrun-{VERSION}-linux-x86_64.tar.gz"
pytestmark = pytest.mark.skipif(not WHEELS or not TARBALL.exists(),
                                reason=f"no rankrun {VERSION} wheel and tarball in {DIST}: run `make wheel` first")


def sh(args, **kw):
    kw.setdefault("timeout", 300)
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, **kw)


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in JOB_VARS}
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def unpacked(tmp_path_factory):
    """The tarball, unpacked: its top folder."""
    where = tmp_path_factory.mktemp("tarball")
    with tarfile.open(TARBALL) as tf:
        tf.extractall(where)
    return where / f"rankrun-{VERSION}"


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    """A new venv (no system site packages) with the wheel installed by pip, from the file alone."""
    return venv_with_the_wheel(tmp_path_factory.mktemp("venv") / "venv", sys.executable)


def venv_with_the_wheel(where, python, *venv_args):
    """A venv made at `where` by `python -m venv`, the wheel installed into it by its own pip."""
    r = sh([python, "-m", "venv", *venv_args, where])
    assert r.returncode == 0, r.stdout + r.stderr
    r = sh([where / "bin" / "python", "-m", "pip", "install", "--no-index", "--disable-pip-version-check",
            WHEELS[-1]], env=clean_env())
    assert r.returncode == 0, r.stdout + r.stderr
    return where


def glibc_floor(path):
    out = sh(["objdump", "-T", path]).stdout
    versions = [tuple(int(x) for x in v.split(".")) for v in re.findall(r"\bGLIBC_([0-9.]+)\b", out)]
    return max(versions)


def needed(path):
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", sh(["readelf", "-d", path]).stdout)


def test_the_programs_need_only_glibc_2_28(unpacked):
    for program in ("rankrun", "rankrun-store"):
        path = unpacked / "bin" / program
        extra = set(needed(path)) - GLIBC_LIBRARIES
        assert not extra, f"{program} needs {extra}: only glibc's libraries may be needed"
        assert glibc_floor(path) <= (2, 28), f"{program} needs GLIBC_{glibc_floor(path)}"
        assert "not stripped" not in sh(["file", path]).stdout, f"{program} is not stripped"
    r = sh([unpacked / "bin" / "rankrun", "--version"])
    assert r.returncode == 0 and VERSION in r.stdout, r.stdout + r.stderr
    for name in ("share/man/man1/rankrun.1.gz", "share/man/man1/rankrun-store.1.gz",
                 "share/bash-completion/completions/rankrun"):
        assert (unpacked / name).is_file(), name


def test_the_wheel_tag_is_the_floor_of_its_files(tmp_path):
    wheel = WHEELS[-1]
    tag = re.search(r"manylinux_(\d+)_(\d+)_x86_64", wheel.name)
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(tmp_path)
        names = zf.namelist()
    assert f"rankrun-{VERSION}.data/scripts/rankrun" in names
    assert f"rankrun-{VERSION}.data/scripts/rankrun-store" in names
    wheel_meta = (tmp_path / f"rankrun-{VERSION}.dist-info" / "WHEEL").read_text()
    assert f"Tag: py3-none-{wheel.name.split('-py3-none-')[1][:-4]}" in wheel_meta
    elves = [p for p in tmp_path.rglob("*") if p.is_file() and p.read_bytes()[:4] == b"\x7fELF"]
    assert {p.name for p in elves} >= {"rankrun", "rankrun-store"}
    assert any(p.name.startswith("librankrun_worker.so") for p in elves), names
    floor = max(glibc_floor(p)[:2] for p in elves)
    assert (int(tag.group(1)), int(tag.group(2))) == floor, (wheel.name, floor)
    assert floor <= (2, 28)


def test_rankrun_from_the_venv_runs_a_torch_job(venv, tmp_path):
    rankrun = venv / "bin" / "rankrun"
    assert rankrun.is_file()
    if sh(["/usr/bin/python3", "-c", "import torch.distributed"]).returncode != 0:
        pytest.skip("python3-torch is missing: the venv's rankrun cannot run torch workers here")
    # the venv on PATH, as `source venv/bin/activate` does; the workers' Python is the system's,
    # which has torch (the venv has none)
    env = clean_env(PATH=f"{venv / 'bin'}:{os.environ['PATH']}", VIRTUAL_ENV=str(venv), PYTHON_EXEC="/usr/bin/python3")
    assert shutil.which("rankrun", path=env["PATH"]) == str(rankrun)
    r = sh(["rankrun", "--nproc-per-node", "3", SCRIPTS / "ddp_allreduce.py"], env=env, timeout=180, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    for rank in range(3):
        assert f"rank {rank}/3 all_reduce=6 ok" in r.stdout, r.stdout + r.stderr
    # python -m rankrun: the same program, the same arguments, its exit code
    py = venv / "bin" / "python"
    r = sh([py, "-m", "rankrun", "--version"], env=env)
    assert r.returncode == 0 and VERSION in r.stdout, r.stdout + r.stderr
    r = sh([py, "-m", "rankrun", "--nproc-per-node", "2", "--no-python", "sh", "-c", "exit $((RANK + 3))"],
           env=env, timeout=120)
    assert r.returncode == 3, r.stdout + r.stderr
    r = sh([py, "-m", "rankrun", "--no-such-flag"], env=env)
    assert r.returncode != 0 and "--no-such-flag" in r.stdout + r.stderr


@pytest.fixture(scope="module")
def torch_venv(tmp_path_factory):
    """A venv over Debian's python3 with its packages (torch among them), the wheel installed."""
    if sh(["/usr/bin/python3", "-c", "import torch.distributed"]).returncode != 0:
        pytest.skip("python3-torch is missing: no venv with torch can be made here")
    return venv_with_the_wheel(tmp_path_factory.mktemp("torch-venv") / "venv", "/usr/bin/python3",
                               "--system-site-packages")


def not_activated(venv_without_torch):
    """An environment in which no venv is active and the python3 that PATH finds has no torch."""
    env = {k: v for k, v in clean_env().items() if k not in ("PYTHON_EXEC", "VIRTUAL_ENV", "CONDA_PREFIX")}
    env["PATH"] = f"{venv_without_torch / 'bin'}:/usr/sbin:/usr/bin:/sbin:/bin"
    assert sh(["python3", "-c", "import torch"], env=env).returncode != 0
    return env


def test_a_venvs_rankrun_runs_that_venvs_python_when_the_venv_is_not_active(torch_venv, venv, tmp_path):
    env = not_activated(venv)
    rankrun = torch_venv / "bin" / "rankrun"
    r = sh([rankrun, "--nproc-per-node", "2", SCRIPTS / "ddp_allreduce.py"], env=env, timeout=180, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    for rank in range(2):
        assert f"rank {rank}/2 all_reduce=3 ok" in r.stdout, r.stdout + r.stderr
    assert re.search(rf"Python workers: {re.escape(str(torch_venv))}/bin/python3? \(the environment rankrun is "
                     r"installed in\), torch 1\.13", r.stderr), r.stderr
    # a link named torchrun elsewhere on PATH, as a container image makes: the same, under that name
    links = tmp_path / "links"
    links.mkdir()
    (links / "torchrun").symlink_to(rankrun)
    env_link = dict(env, PATH=f"{links}:{env['PATH']}")
    r = sh(["torchrun", "--nproc_per_node", "2", "--tee", "3", "--role", "", SCRIPTS / "ddp_allreduce.py"],
           env=env_link, timeout=180, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "rank 1/2 all_reduce=3 ok" in r.stdout, r.stdout + r.stderr


def test_python_m_rankrun_runs_its_own_interpreter(torch_venv, venv, tmp_path):
    env = not_activated(venv)
    r = sh([torch_venv / "bin" / "python", "-m", "rankrun", "--nproc-per-node", "2", SCRIPTS / "ddp_allreduce.py"],
           env=env, timeout=180, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "rank 1/2 all_reduce=3 ok" in r.stdout, r.stdout + r.stderr
    assert f"Python workers: {torch_venv}/bin/python (the interpreter of python -m rankrun), torch 1.13" in r.stderr
    # the interpreter of python -m rankrun, though its rankrun's venv has torch: this one has none,
    # and the report says so beside the error
    r = sh([venv / "bin" / "python", "-m", "rankrun", "--nproc-per-node", "1", SCRIPTS / "ddp_allreduce.py"],
           env=env, timeout=180, cwd=tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "No module named 'torch'" in r.stderr, r.stderr
    assert re.search(rf"  python: {re.escape(str(venv))}/bin/python \(the interpreter of python -m rankrun\), "
                     r"no torch in ", r.stderr), r.stderr


def test_python_exec_wins_over_the_venv(torch_venv, venv, tmp_path):
    env = dict(not_activated(venv), PYTHON_EXEC=str(venv / "bin" / "python3"))
    r = sh([torch_venv / "bin" / "rankrun", "--nproc-per-node", "1", SCRIPTS / "ddp_allreduce.py"], env=env,
           timeout=180, cwd=tmp_path)
    assert r.returncode == 1 and "No module named 'torch'" in r.stderr, r.stdout + r.stderr
    assert f"Python workers: {venv}/bin/python3 (PYTHON_EXEC), no torch in" in r.stderr, r.stderr
    r = sh([torch_venv / "bin" / "rankrun", "--check", "--nproc-per-node", "1", SCRIPTS / "ddp_allreduce.py"],
           env=env, timeout=180, cwd=tmp_path)
    assert r.returncode != 0 and f"{venv}/bin/python3 (PYTHON_EXEC) cannot import torch" in r.stdout + r.stderr, \
        r.stdout + r.stderr


def test_external_consumer_builds_against_the_runtime_in_the_venv(venv, tmp_path):
    if shutil.which("cmake") is None:
        pytest.skip("cmake is missing")
    py = venv / "bin" / "python"
    env = clean_env(PATH=f"{venv / 'bin'}:{os.environ['PATH']}")
    cmake_dir = sh([py, "-m", "rankrun", "--cmake-dir"], env=env).stdout.strip()
    assert cmake_dir.startswith(str(venv)) and (Path(cmake_dir) / "rankrunConfig.cmake").is_file(), cmake_dir
    build = tmp_path / "build"
    r = sh(["cmake", "-S", CONSUMER, "-B", build, f"-DCMAKE_PREFIX_PATH={cmake_dir}"], env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    found = re.search(r"^rankrun_DIR:PATH=(.*)$", (build / "CMakeCache.txt").read_text(), re.M).group(1)
    assert found == cmake_dir, found
    r = sh(["cmake", "--build", build], env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    # two ranks under the venv's rankrun; the runtime is found through the consumer's RUNPATH
    r = sh(["rankrun", "--nproc-per-node", "2", "--no-python", build / "consumer"], env=env, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    for rank in range(2):
        assert f"consumer rank {rank}/2 reads" in r.stdout, r.stdout + r.stderr
    r = sh(["rankrun", "--nproc-per-node", "2", "--no-python", build / "consumer_c"], env=env, timeout=120)
    assert r.returncode == 0 and "consumer_c rank 1/2" in r.stdout, r.stdout + r.stderr

    if shutil.which("pkg-config") is None:
        pytest.skip("pkg-config is missing: the consumer built with CMake, not the one with pkg-config")
    pc_env = {**env, "PKG_CONFIG_PATH": sh([py, "-m", "rankrun", "--pkg-config-dir"], env=env).stdout.strip()}
    flags = sh(["pkg-config", "--cflags", "--libs", "rankrun-worker"], env=pc_env)
    assert flags.returncode == 0 and str(venv) in flags.stdout, flags.stdout + flags.stderr
    lib_dir = sh([py, "-m", "rankrun", "--lib-dir"], env=env).stdout.strip()
    exe = tmp_path / "consumer_pc"
    r = sh(["g++", "-std=c++17", "-Wall", "-Wextra", "-Werror", CONSUMER / "main.cpp", "-o", exe,
            *flags.stdout.split(), f"-Wl,-rpath,{lib_dir}"], env=pc_env)
    assert r.returncode == 0, r.stderr
    r = sh(["rankrun", "--nproc-per-node", "2", "--no-python", exe], env=env, timeout=120)
    assert r.returncode == 0 and "consumer rank 1/2 reads" in r.stdout, r.stdout + r.stderr


BUILD = Path(os.environ.get("RANKRUN_BUILD_DIR", ROOT / "build"))
FAKE_NCCL = BUILD / "tests" / "helpers" / "fake_nccl" / "libnccl.so.2"
FAKE_CUDART = BUILD / "tests" / "helpers" / "fake_cudart" / "libcudart.so.13"


def test_a_cpp_trainer_built_against_the_wheels_runtime_gets_nccl_from_the_venv(venv, tmp_path):
    """tests/helpers/nccl_worker.cpp compiled with the wheel's pkg-config only (no CUDA folder),
    NCCL and the CUDA runtime where torch's nvidia-* wheels put them in the venv: stand-ins built
    against the real headers, which record each call (test_nccl_loader.py has the call-by-call
    checks)."""
    if not FAKE_NCCL.exists() or shutil.which("pkg-config") is None:
        pytest.skip(f"{FAKE_NCCL} (the stand-in NCCL of the dev build) or pkg-config is missing")
    py = venv / "bin" / "python"
    site = Path(sh([py, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"]).stdout.strip())
    for source, rel in ((FAKE_NCCL, "nvidia/nccl/lib/libnccl.so.2"), (FAKE_CUDART, "nvidia/cu13/lib/libcudart.so.13")):
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(source, site / rel)
    env = {k: v for k, v in clean_env().items() if k not in ("LD_LIBRARY_PATH", "RANKRUN_NCCL_LIBRARY",
                                                                 "RANKRUN_CUDART_LIBRARY", "CONDA_PREFIX")}
    pc_env = {**env, "PKG_CONFIG_PATH": sh([py, "-m", "rankrun", "--pkg-config-dir"], env=env).stdout.strip()}
    flags = sh(["pkg-config", "--cflags", "--libs", "rankrun-worker"], env=pc_env)
    assert flags.returncode == 0 and "cuda" not in flags.stdout.lower(), flags.stdout + flags.stderr
    lib_dir = sh([py, "-m", "rankrun", "--lib-dir"], env=env).stdout.strip()
    exe = tmp_path / "nccl_worker"
    r = sh(["g++", "-std=c++17", "-Wall", "-Wextra", "-Werror", HELPERS / "nccl_worker.cpp", "-o", exe,
            *flags.stdout.split(), f"-Wl,-rpath,{lib_dir}"], env=pc_env)
    assert r.returncode == 0, r.stderr
    log = tmp_path / "calls.log"
    # no venv active: the runtime finds the venv from its own place in site-packages
    r = sh([venv / "bin" / "rankrun", "--nproc-per-node", "2", "--gpus", "0,1", "--no-python", exe],
           env={**env, "RANKRUN_FAKE_CUDA_LOG": str(log)}, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    for rank in (0, 1):
        line = next((l for l in r.stdout.splitlines() if l.startswith(f"[{rank}] rank {rank}/2 ")), "")
        assert f"nccl={site}/nvidia/nccl/lib/libnccl.so.2 (" in line, r.stdout
        assert f"cudart={site}/nvidia/cu13/lib/libcudart.so.13 (" in line, r.stdout
    made = [l.split()[2] for l in log.read_text().splitlines()]
    assert made.count("ncclCommInitRankConfig") == 2 and made.count("cudaSetDevice") >= 2, made


@pytest.fixture(scope="module")
def bullseye_root():
    """A Debian bullseye root (glibc 2.31, Python 3.9), made once by tools/torch-root.sh."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare to enter the bullseye root")
    r = sh([ROOT / "tools" / "torch-root.sh", "bullseye"], timeout=900)
    if r.returncode != 0:
        pytest.skip(f"no bullseye root (tools/torch-root.sh bullseye): {r.stderr.strip()[-300:]}")
    return r.stdout.strip().splitlines()[-1]


def test_the_binary_alone_runs_a_job_in_a_bullseye_root(unpacked, bullseye_root, tmp_path):
    root = bullseye_root
    # only the binary, at a path the root sees (in-root binds this test's /tmp)
    binary = tmp_path / "rankrun"
    shutil.copy2(unpacked / "bin" / "rankrun", binary)
    env = clean_env(RANKRUN_TORCH_ROOT=root)
    glibc = sh([HELPERS / "in-root", "/usr/bin/ldd", "--version"], env=env)
    assert "2.31" in glibc.stdout.splitlines()[0], glibc.stdout + glibc.stderr
    script = tmp_path / "job.py"
    script.write_text("import os, platform\n"
                      "print(f\"rank {os.environ['RANK']}/{os.environ['WORLD_SIZE']} python {platform.python_version()} "
                      "glibc {platform.libc_ver()[1]}\", flush=True)\n")
    r = sh([HELPERS / "in-root", binary, "--nproc-per-node", "3", script], env=env, timeout=120, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    for rank in range(3):
        assert f"rank {rank}/3 python 3.9" in r.stdout and "glibc 2.31" in r.stdout, r.stdout + r.stderr


RUNTIME_JOB = SCRIPTS / "runtime_import_job.py"


def runtime_job_ok(r, ranks, library_under):
    """Every rank imported rankrun of this version, planned its shard and agreed on the batch count,
    with the librankrun_worker found under `library_under`."""
    assert r.returncode == 0, r.stdout + r.stderr
    shards = []
    for rank in range(ranks):
        m = re.search(rf"rank {rank} python \S+ rankrun {re.escape(VERSION)} shard ([\d,]+) even 2 library (\S+)",
                      r.stdout)
        assert m, r.stdout + r.stderr
        shards += [int(i) for i in m.group(1).split(",")]
        assert m.group(2).startswith(str(library_under)), m.group(2)
    assert sorted(shards) == list(range(10)), shards


def test_the_wheels_rankrun_gives_its_workers_rankrun_data_and_progress(torch_venv, venv, tmp_path):
    env = not_activated(venv)
    r = sh([torch_venv / "bin" / "rankrun", "--nproc-per-node", "2", RUNTIME_JOB], env=env, timeout=180, cwd=tmp_path)
    runtime_job_ok(r, 2, torch_venv)
    # From the wheel in a venv without torch, outside any job: a world of one, the wheel's library.
    r = sh([venv / "bin" / "python", "-c", "import rankrun.data as d, rankrun._native as n; "
            "print(list(d.DistributedSampler(4, num_replicas=2, rank=1, shuffle=False)), n.library_path())"],
           env=clean_env(), cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.startswith("[1, 3] "), r.stdout + r.stderr
    assert r.stdout.split()[-1].startswith(str(venv)), r.stdout


def test_the_tarballs_rankrun_gives_its_workers_rankrun_data_in_a_bullseye_root(unpacked, bullseye_root, tmp_path):
    # The tarball's rankrun and runtime, copied into a folder the root sees, run Python 3.9 workers.
    root = bullseye_root
    prefix = tmp_path / "prefix"
    shutil.copytree(unpacked, prefix, symlinks=True)
    script = tmp_path / "job.py"
    shutil.copy2(RUNTIME_JOB, script)
    env = clean_env(RANKRUN_TORCH_ROOT=root)
    r = sh([HELPERS / "in-root", prefix / "bin" / "rankrun", "--nproc-per-node", "2", script], env=env, timeout=120,
           cwd=tmp_path)
    runtime_job_ok(r, 2, prefix / "lib")
    assert "python 3.9" in r.stdout, r.stdout
