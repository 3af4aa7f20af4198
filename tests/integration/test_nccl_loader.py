"""NcclCommunicator loading NCCL and the CUDA runtime at run time, as trainers meet it: real rank
processes under the real rankrun, on stand-in libraries (tests/helpers/fake_nccl.c, fake_cudart.c:
libnccl.so.2 and libcudart.so.13 built against the real headers) that record every call with its
arguments in $RANKRUN_FAKE_CUDA_LOG. The trainer is tests/helpers/nccl_worker.cpp.

Where the runtime finds them: a venv's site-packages laid out as torch's pip wheels lay it out,
the site-packages the runtime itself is installed in, PYTHONPATH, a library already loaded in the
process, the override variables, LD_LIBRARY_PATH; and nowhere (the system's libnccl.so.2 hidden by
an empty ld.so.cache in a mount namespace of the test's own): the job fails naming every place.
Run: RANKRUN_BUILD_DIR=build /usr/bin/python3 -m pytest -q tests/integration/test_nccl_loader.py
"""
import json
import os
import re
import shutil
import subprocess

import pytest

from harness import BUILD, RANKRUN

HELPERS = BUILD / "tests" / "helpers"
WORKER = HELPERS / "nccl_worker"
FAKE_NCCL = HELPERS / "fake_nccl" / "libnccl.so.2"
FAKE_NCCL_2_12 = HELPERS / "fake_nccl_2_12" / "libnccl.so.2"
FAKE_CUDART = HELPERS / "fake_cudart" / "libcudart.so.13"
RUNTIME = BUILD / "worker_runtime"

# What could point the runtime at a library other than the test's.
CLEARED = ["RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "CUDA_VISIBLE_DEVICES",
           "TORCHELASTIC_ERROR_FILE", "VIRTUAL_ENV", "PYTHONPATH", "CONDA_PREFIX", "LD_LIBRARY_PATH", "LD_PRELOAD",
           "RANKRUN_NCCL_LIBRARY", "RANKRUN_CUDART_LIBRARY", "RANKRUN_FAKE_NCCL_FAIL", "RANKRUN_FAKE_NCCL_POLLS",
           "RANKRUN_FAKE_CUDA_DEVICES"]

pytestmark = pytest.mark.skipif(not WORKER.exists() or not FAKE_NCCL.exists(),
                                reason=f"{WORKER} is not built (the runtime has no NcclCommunicator without nccl.h)")


def environment(log, extra):
    env = {k: v for k, v in os.environ.items() if k not in CLEARED}
    env["RANKRUN_FAKE_CUDA_LOG"] = str(log)
    env.update({k: str(v) for k, v in extra.items()})
    return env


def launch(log, extra, args=(), launcher_args=("--gpus", "0,1"), wrap=()):
    """A 2-rank job of nccl_worker under rankrun."""
    cmd = [*wrap, str(RANKRUN), "--nproc-per-node", "2", "--no-python", *launcher_args, str(WORKER), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=environment(log, extra))


def alone(log, extra, args=("--libraries",)):
    """nccl_worker as a world of one, without a launcher."""
    return subprocess.run([str(WORKER), *args], capture_output=True, text=True, timeout=60, env=environment(log, extra))


def calls(log):
    """{rank: [(function, {key: value})]} in the order each rank made them."""
    out = {}
    if not log.exists():
        return out
    for line in log.read_text().splitlines():
        rank, pid, function, *args = line.split()  # "rank=R pid=P function key=value ..."
        fields = dict(w.split("=", 1) for w in args)
        fields["pid"] = pid.split("=", 1)[1]
        out.setdefault(int(rank.split("=", 1)[1].replace("-", "0")), []).append((function, fields))
    return out


def made(rank_calls, *functions):
    """The calls to `functions`, in order (the getters of error strings and versions left out)."""
    return [(f, a) for f, a in rank_calls if f in functions]


def printed(result, rank):
    line = next(l for l in result.stdout.splitlines() if l.startswith(f"[{rank}] rank "))
    m = re.fullmatch(rf"\[{rank}\] rank (\d+)/(\d+) device (\d+) comm=(\S+) nccl=(\S+) \((.+?)\) version (\S+) "
                     r"cudart=(\S+) \((.+)\)", line)
    assert m, line
    return dict(zip(["rank", "world", "device", "comm", "nccl", "nccl_origin", "version", "cudart", "cudart_origin"],
                    m.groups()))


def fake_folders():
    return f"{FAKE_NCCL.parent}:{FAKE_CUDART.parent}"


def site_packages(root, cudart="nvidia/cu13/lib/libcudart.so.13"):
    """A site-packages under `root` with torch's pip wheels' layout: nvidia-nccl-cu13's
    nvidia/nccl/lib/libnccl.so.2 and, by default, nvidia-cuda-runtime's nvidia/cu13/lib."""
    for source, rel in ((FAKE_NCCL, "nvidia/nccl/lib/libnccl.so.2"), (FAKE_CUDART, cudart)):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(source, root / rel)
    return root


def test_two_ranks_pinned_set_their_device_then_share_rank_0s_id(tmp_path):
    log = tmp_path / "calls.log"
    r = launch(log, {"LD_LIBRARY_PATH": fake_folders(), "RANKRUN_FAKE_NCCL_POLLS": 2})
    assert r.returncode == 0, r
    by_rank = calls(log)
    assert set(by_rank) == {0, 1}, log.read_text()
    ids = [a["id"] for f, a in by_rank[0] if f == "ncclGetUniqueId"]
    assert len(ids) == 1 and len(ids[0]) == 256, by_rank[0]
    for rank in (0, 1):
        seen = printed(r, rank)
        assert (seen["rank"], seen["world"], seen["device"]) == (str(rank), "2", "0"), seen
        assert (seen["nccl"], seen["cudart"]) == (str(FAKE_NCCL), str(FAKE_CUDART)), seen
        assert seen["nccl_origin"] == "LD_LIBRARY_PATH, then the system's library path", seen
        order = made(by_rank[rank], "cudaSetDevice", "ncclGetUniqueId", "ncclCommInitRankConfig", "ncclCommFinalize",
                     "ncclCommDestroy", "ncclCommAbort")
        # The device first (rankrun pinned GPU `rank` as the worker's device 0); rank 0 alone makes the id.
        assert [f for f, _ in order] == ["cudaSetDevice"] + ["ncclGetUniqueId"] * (rank == 0) + [
            "ncclCommInitRankConfig", "ncclCommFinalize", "ncclCommDestroy"], by_rank[rank]
        assert order[0][1] == {"pid": order[0][1]["pid"], "device": "0", "CUDA_VISIBLE_DEVICES": str(rank)}
        init = order[-3][1]
        # Every byte of rank 0's id reached rank 1 through the store.
        assert (init["nranks"], init["rank"], init["id"]) == ("2", str(rank), ids[0]), init
        assert (init["blocking"], init["magic"]) == ("0", "0xcafebeef"), init
        comm = init["comm"]
        assert seen["comm"] == comm
        assert order[-2][1]["comm"] == comm and order[-1][1]["comm"] == comm
        # Non-blocking: the init and the finalize were waited for, on that communicator.
        polls = [a for f, a in by_rank[rank] if f == "ncclCommGetAsyncError"]
        assert len(polls) >= 6 and all(a["comm"] == comm for a in polls), polls
        assert [a["state"] for a in polls[:3]] == ["7", "7", "0"], polls


def test_without_pinning_the_device_is_the_local_rank(tmp_path):
    log = tmp_path / "calls.log"
    r = launch(log, {"LD_LIBRARY_PATH": fake_folders(), "CUDA_VISIBLE_DEVICES": "0,1"}, launcher_args=("--no-pin",))
    assert r.returncode == 0, r
    for rank, rank_calls in calls(log).items():
        assert made(rank_calls, "cudaSetDevice")[0][1]["device"] == str(rank)
        assert printed(r, rank)["device"] == str(rank)


def test_found_in_the_venv_as_torchs_wheels_install_it(tmp_path):
    venv = tmp_path / "venv"
    sp = site_packages(venv / "lib" / "python3.12" / "site-packages")
    log = tmp_path / "calls.log"
    r = launch(log, {"VIRTUAL_ENV": venv})
    assert r.returncode == 0, r
    for rank in (0, 1):
        seen = printed(r, rank)
        assert (seen["nccl"], seen["nccl_origin"]) == (str(sp / "nvidia/nccl/lib/libnccl.so.2"), "VIRTUAL_ENV"), seen
        assert (seen["cudart"], seen["cudart_origin"]) == (str(sp / "nvidia/cu13/lib/libcudart.so.13"), "VIRTUAL_ENV")
    assert set(calls(log)) == {0, 1}


def test_found_in_the_site_packages_the_runtime_is_installed_in(tmp_path):
    # As the wheel installs it: site-packages/rankrun/lib/librankrun_worker.so.N; CUDA 12's layout.
    sp = site_packages(tmp_path / "lib" / "site-packages", cudart="nvidia/cuda_runtime/lib/libcudart.so.12")
    lib = sp / "rankrun" / "lib"
    lib.mkdir(parents=True)
    for f in RUNTIME.glob("librankrun_worker.so*"):
        shutil.copy(f, lib / f.name, follow_symlinks=True)
    r = alone(tmp_path / "calls.log", {"LD_LIBRARY_PATH": lib})
    assert r.returncode == 0, r
    assert re.fullmatch(rf"nccl={sp}/nvidia/nccl/lib/libnccl.so.2 \(the site-packages of librankrun_worker\) "
                        rf"version [\d.]+ cudart={sp}/nvidia/cuda_runtime/lib/libcudart.so.12 "
                        r"\(the site-packages of librankrun_worker\)", r.stdout.strip()), r


def test_found_through_pythonpath(tmp_path):
    sp = site_packages(tmp_path / "extra")
    r = alone(tmp_path / "calls.log", {"PYTHONPATH": f"{tmp_path}/nothing:{sp}"})
    assert r.returncode == 0, r
    assert f"nccl={sp}/nvidia/nccl/lib/libnccl.so.2 (PYTHONPATH)" in r.stdout, r


def test_a_library_already_loaded_wins_over_the_venv(tmp_path):
    # The trainer links its NCCL (here: preloaded): a second one beside it would not know its
    # communicators, so the runtime takes that one.
    venv = tmp_path / "venv"
    site_packages(venv / "lib" / "python3.12" / "site-packages")
    r = alone(tmp_path / "calls.log", {"VIRTUAL_ENV": venv, "LD_PRELOAD": FAKE_NCCL})
    assert r.returncode == 0, r
    assert f"nccl={FAKE_NCCL} (already loaded in this process)" in r.stdout, r
    assert f"/venv/lib/python3.12/site-packages/nvidia/cu13/lib/libcudart.so.13 (VIRTUAL_ENV)" in r.stdout, r


def test_the_override_variables_name_the_files(tmp_path):
    venv = tmp_path / "venv"
    site_packages(venv / "lib" / "python3.12" / "site-packages")
    r = alone(tmp_path / "calls.log", {"VIRTUAL_ENV": venv, "RANKRUN_NCCL_LIBRARY": FAKE_NCCL,
                                       "RANKRUN_CUDART_LIBRARY": FAKE_CUDART})
    assert r.returncode == 0, r
    assert f"nccl={FAKE_NCCL} (RANKRUN_NCCL_LIBRARY)" in r.stdout, r
    assert f"cudart={FAKE_CUDART} (RANKRUN_CUDART_LIBRARY)" in r.stdout, r


def test_abort_cancels_instead_of_finalizing(tmp_path):
    log = tmp_path / "calls.log"
    r = alone(log, {"LD_LIBRARY_PATH": fake_folders()}, args=["--abort"])
    assert r.returncode == 0, r
    order = [f for f, _ in made(calls(log)[0], "ncclCommInitRankConfig", "ncclCommFinalize", "ncclCommDestroy",
                                "ncclCommAbort")]
    assert order == ["ncclCommInitRankConfig", "ncclCommAbort"], log.read_text()


def root_cause(result):
    """The error line of rankrun's report and the lines below it up to the traceback."""
    lines = result.stderr.splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith("  error: "))
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("  traceback"))
    return "\n".join(lines[start:end])


def can_hide_the_system_libraries():
    return os.geteuid() == 0 and shutil.which("unshare") and os.path.exists("/etc/ld.so.cache")


@pytest.mark.skipif(not can_hide_the_system_libraries(), reason="needs root and unshare to hide /etc/ld.so.cache")
def test_found_nowhere_the_job_fails_naming_every_place_and_the_fix(tmp_path):
    # This machine's libnccl.so.2 is in ld.so.cache: an empty one, in a mount namespace of the
    # job's own, leaves the loader the default folders only, where no NCCL is.
    empty = tmp_path / "ld.so.cache"
    empty.write_bytes(b"")
    wrap = ["unshare", "-m", "sh", "-c", f'mount --bind "{empty}" /etc/ld.so.cache && exec "$0" "$@"']
    venv = tmp_path / "venv"
    (venv / "lib" / "python3.12" / "site-packages").mkdir(parents=True)
    r = launch(tmp_path / "calls.log", {"VIRTUAL_ENV": venv}, wrap=wrap)
    assert r.returncode == 1, r
    sp = venv / "lib" / "python3.12" / "site-packages"
    # (rankrun puts a folder of its own on the workers' PYTHONPATH: looked at too.)
    nccl = re.escape(
        "  error: rankrun::NcclError: cannot load NCCL (libnccl.so.2) for rankrun::NcclCommunicator; looked, in order:\n"
        "    libnccl.so.2 already loaded in this process: no\n"
        f"    {sp} (VIRTUAL_ENV): no nvidia/nccl/lib/libnccl.so.2\n") + \
        r"(    \S+ \(PYTHONPATH\): no nvidia/nccl/lib/libnccl.so.2\n)*" + re.escape(
        "    libnccl.so.2 by name (LD_LIBRARY_PATH not set; the system's library path): not found\n"
        "  fix: pip install nvidia-nccl-cu12 (CUDA 13: nvidia-nccl-cu13) in this venv, or set LD_LIBRARY_PATH to the "
        "folder of libnccl.so.2, or RANKRUN_NCCL_LIBRARY=/path/to/libnccl.so.2\n")
    cudart = re.escape(
        "cannot load the CUDA runtime (libcudart.so.13, libcudart.so.12, libcudart.so.11.0 or libcudart.so) for "
        "rankrun::NcclCommunicator; looked, in order:\n"
        "    libcudart.so.13, libcudart.so.12, libcudart.so.11.0 or libcudart.so already loaded in this process: no\n"
        f"    {sp} (VIRTUAL_ENV): no nvidia/cu13/lib/libcudart.so.13, nvidia/cuda_runtime/lib/libcudart.so.12 or "
        "nvidia/cuda_runtime/lib/libcudart.so.11.0\n") + \
        r"(    \S+ \(PYTHONPATH\): no .*\n)*" + re.escape(
        "    libcudart.so.13, libcudart.so.12, libcudart.so.11.0 or libcudart.so by name (LD_LIBRARY_PATH not set; the "
        "system's library path): not found\n"
        "  fix: pip install nvidia-cuda-runtime-cu12 (CUDA 13: nvidia-cuda-runtime) in this venv, or set "
        "LD_LIBRARY_PATH to the folder of libcudart.so.N (e.g. /usr/local/cuda/lib64), or "
        "RANKRUN_CUDART_LIBRARY=/path/to/libcudart.so.N")
    assert re.fullmatch(nccl + cudart, root_cause(r)), r
    assert not (tmp_path / "calls.log").exists()


def test_an_nccl_older_than_2_14_is_named_with_the_functions_it_lacks(tmp_path):
    r = launch(tmp_path / "calls.log", {"LD_LIBRARY_PATH": fake_folders(), "RANKRUN_NCCL_LIBRARY": FAKE_NCCL_2_12})
    assert r.returncode == 1, r
    assert root_cause(r) == (
        f"  error: rankrun::NcclError: NCCL at {FAKE_NCCL_2_12} (RANKRUN_NCCL_LIBRARY) has no ncclCommInitRankConfig "
        "and ncclCommFinalize, which rankrun::NcclCommunicator calls: it needs NCCL 2.14 or newer (pip install "
        "nvidia-nccl-cu12 (CUDA 13: nvidia-nccl-cu13) in this venv, or set LD_LIBRARY_PATH to the folder of "
        "libnccl.so.2, or RANKRUN_NCCL_LIBRARY=/path/to/libnccl.so.2)"), r


def test_a_failed_init_is_aborted_and_named_with_nccls_words(tmp_path):
    log = tmp_path / "calls.log"
    error_file = tmp_path / "error.json"
    r = alone(log, {"LD_LIBRARY_PATH": fake_folders(), "RANKRUN_FAKE_NCCL_FAIL": "ncclCommInitRankConfig",
                    "TORCHELASTIC_ERROR_FILE": error_file}, args=[])
    assert r.returncode == 1, r
    assert json.loads(error_file.read_text())["message"]["message"] == (
        "rankrun::NcclError: ncclCommInitRankConfig failed on rank 0 (device 0): unhandled system error (run with "
        "NCCL_DEBUG=INFO for details) (fake NCCL: ncclCommInitRankConfig failed on purpose)")
    order = made(calls(log)[0], "ncclCommInitRankConfig", "ncclCommAbort", "ncclCommFinalize", "ncclCommDestroy")
    assert [f for f, _ in order] == ["ncclCommInitRankConfig", "ncclCommAbort"], log.read_text()
    assert order[1][1]["comm"] == order[0][1]["comm"]


def test_a_device_cuda_cannot_set_fails_before_any_nccl_call(tmp_path):
    log = tmp_path / "calls.log"
    r = launch(log, {"LD_LIBRARY_PATH": fake_folders(), "RANKRUN_FAKE_CUDA_DEVICES": 0})
    assert r.returncode == 1, r
    # The runtime's file in the words: a CUDA runtime newer than the driver fails here too.
    assert re.search(r"^  error: rankrun::NcclError: cudaSetDevice\(0\) failed on rank [01]: invalid device ordinal "
                     r"\(CUDA_VISIBLE_DEVICES=[01], LOCAL_RANK=[01], CUDA sees 0 devices; CUDA runtime "
                     + re.escape(f"{FAKE_CUDART}, LD_LIBRARY_PATH, then the system's library path)") + "$",
                     r.stderr, re.M), r
    for rank_calls in calls(log).values():
        assert not made(rank_calls, "ncclGetUniqueId", "ncclCommInitRankConfig"), rank_calls
