"""The node's GPUs, read through NVML before anything starts and before every restart: memory
held by processes that are not the job's, GPUs that are unfit, and the memory the last attempt
has not yet released. NVML here is the test suite's scripted library (tests/helpers/fake_nvml.c)
loaded through RANKRUN_NVML_LIBRARY; the processes and /proc facts are real."""
import os
import re
import signal
import subprocess
import threading
import time

import pytest

from harness import BUILD, PYTHON, RANKRUN, SCRIPTS, run

FAKE_NVML = BUILD / "tests" / "helpers" / "libfake_nvml.so"
HOLDER = SCRIPTS / "gpu_holder.py"
GIB8 = 8 << 30


@pytest.fixture
def nvml(tmp_path):
    """A scripted NVML with two H200s; returns (state file, env for rankrun)."""
    state = tmp_path / "nvml.state"
    state.write_text("gpu 0 name=NVIDIA_H200\ngpu 1 name=NVIDIA_H200\n")
    env = {"RANKRUN_NVML_LIBRARY": str(FAKE_NVML), "RANKRUN_FAKE_NVML": str(state)}
    return state, env


@pytest.fixture
def orphan():
    """A real process whose session is gone (its session leader, a shell, exited): someone's
    leftover, as a crashed launcher's worker is. Killed at the end by its pid."""
    out = subprocess.run(["setsid", "sh", "-c", "sleep 120 >/dev/null 2>&1 & echo $!"], capture_output=True, text=True,
                         check=True)
    pid = int(out.stdout.strip())
    time.sleep(0.1)
    yield pid
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def add(state, line):
    with open(state, "a") as f:
        f.write(line + "\n")


def test_memory_held_by_another_process_is_named_before_any_worker_starts(nvml, orphan):
    state, env = nvml
    add(state, f"proc 0 {orphan} 9342000000")
    r = run(["--gpus", "0,1", "--nproc-per-node", "2", "--no-python", "true"], env=env)
    assert r.returncode == 0, r
    line = next(l for l in r.stderr.splitlines() if "GPU memory in use" in l)
    assert f"8.7 GiB of GPU 0 (NVIDIA H200) held by pid {orphan}" in line, line
    assert "sleep 120" in line and "user root" in line and "running " in line, line
    # its session leader exited (and it was re-parented, unless a subreaper took it)
    assert re.search(r"it looks orphaned: its (parent and its )?session (is|are) gone", line), line
    assert f"kill {orphan}" in line, line
    # before the first worker
    assert r.stderr.index("GPU memory in use") < r.stderr.index("finished"), r


def test_refuse_ends_the_launch_with_2_before_anything_starts(nvml, orphan, tmp_path):
    state, env = nvml
    add(state, f"proc 1 {orphan} {GIB8}")
    marker = tmp_path / "started"
    r = run(["--gpus", "0,1", "--nproc-per-node", "2", "--gpu-check", "refuse", "--no-python", "touch", marker], env=env)
    assert r.returncode == 2, r
    assert f"held by pid {orphan}" in r.stderr, r
    assert "--gpu-check=refuse: nothing was started" in r.stderr, r
    assert not marker.exists()
    # the same through the environment, and off turns the check off
    r = run(["--gpus", "0,1", "--nproc-per-node", "2", "--no-python", "true"], env={**env, "RANKRUN_GPU_CHECK": "refuse"})
    assert r.returncode == 2, r
    r = run(["--gpus", "0,1", "--nproc-per-node", "2", "--gpu-check", "off", "--no-python", "true"], env=env)
    assert r.returncode == 0 and "GPU memory in use" not in r.stderr, r


def test_bad_gpu_check_values_are_usage_errors(nvml):
    _, env = nvml
    r = run(["--gpu-check", "maybe", "--no-python", "true"], env=env)
    assert r.returncode == 2 and "--gpu-check=maybe is not one of warn, refuse or off" in r.stderr, r
    r = run(["--gpu-release-timeout", "-1", "--no-python", "true"], env=env)
    assert r.returncode == 2 and "--gpu-release-timeout=" in r.stderr and "e.g. 30" in r.stderr, r


@pytest.mark.parametrize("line,expect", [
    ("ecc=3", "3 uncorrectable ECC errors since the driver loaded"),
    ("error=15", "NVML cannot use it: GPU is lost"),
    ("error=16", "NVML cannot use it: GPU requires reset"),
    ("retired_pending=1", "retired memory pages wait for a reset"),
    ("remap_pending=1", "remapped memory rows wait for a reset"),
    ("remap_failed=1", "a row remapping failed"),
    ("mode=2", "its compute mode is Prohibited"),
])
def test_check_reports_an_unfit_gpu_as_a_failed_check(nvml, line, expect):
    state, env = nvml
    state.write_text(f"gpu 0 name=NVIDIA_H200\ngpu 1 name=NVIDIA_H200 {line}\n")
    r = run(["--gpus", "0,1", "--nproc-per-node", "2", "--check", "--no-python", "true"], env=env)
    assert r.returncode == 2, r
    fail = [l for l in r.stdout.splitlines() if l.startswith("FAIL GPU 1 health")]
    assert len(fail) == 1 and expect in fail[0], r.stdout
    assert "fix:" in r.stdout.split(fail[0], 1)[1].splitlines()[1], r.stdout
    # and before the first attempt, a warning with the same words
    r = run(["--gpus", "0,1", "--nproc-per-node", "2", "--no-python", "true"], env=env)
    assert r.returncode == 0 and "GPU unfit: GPU 1" in r.stderr and expect in r.stderr, r


def test_check_passes_healthy_gpus_and_names_another_process_as_a_failure(nvml, orphan):
    state, env = nvml
    r = run(["--gpus", "0,1", "--nproc-per-node", "2", "--check", "--no-python", "true"], env=env)
    assert r.returncode == 0, r
    assert "ok   GPU health: 2 GPUs read through NVML: none failing" in r.stdout, r.stdout
    add(state, f"proc 0 {orphan} {GIB8}")
    r = run(["--gpus", "0,1", "--nproc-per-node", "2", "--check", "--no-python", "true"], env=env)
    assert r.returncode == 2, r
    assert re.search(rf"^FAIL GPU 0 memory: 8\.0 GiB of GPU 0 \(NVIDIA H200\) held by pid {orphan}", r.stdout, re.M), r.stdout


def release_after(state, pid_pattern, delay, seen):
    """Removes the listed process of attempt 0 `delay` seconds after it shows up (the driver
    releasing its memory)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        text = state.read_text()
        held = [l for l in text.splitlines() if re.match(pid_pattern, l)]
        if held:
            seen.append(held)
            time.sleep(delay)
            state.write_text("".join(l + "\n" for l in state.read_text().splitlines() if l not in held))
            return
        time.sleep(0.05)


def test_a_restart_waits_until_the_last_attempt_s_gpu_memory_is_released(nvml):
    state, env = nvml
    seen = []
    remover = threading.Thread(target=release_after, args=(state, r"proc 0 \d+ ", 1.5, seen))
    remover.start()
    r = run(["--gpus", "0,1", "--nproc-per-node", "2", "--max-restarts", "1", HOLDER], env=env, timeout=60)
    remover.join()
    assert r.returncode == 0, r
    assert seen, "attempt 0 never listed itself"
    pid = int(re.search(r"holds GPU 0 as pid (\d+)", r.stdout).group(1))
    assert re.search(rf"waiting up to 30s for the last attempt's GPU memory to be released: GPU 0: pid {pid} \(8\.0 GiB\)",
                     r.stderr), r
    assert re.search(r"the last attempt's GPU memory was released after [1-9]\.\d+s", r.stderr), r
    # never onto memory still held
    assert r.stdout.count("attempt 0's memory listed: no") == 2, r
    assert "attempt 0's memory listed: yes" not in r.stdout, r


def test_a_restart_gives_up_on_memory_never_released_and_ends_with_125(nvml):
    state, env = nvml
    r = run(["--gpus", "0,1", "--nproc-per-node", "2", "--max-restarts", "1", "--gpu-release-timeout", "1.5", HOLDER],
            env=env, timeout=60)
    assert r.returncode == 125, r
    pid = int(re.search(r"holds GPU 0 as pid (\d+)", r.stdout).group(1))
    assert f"pid {pid} has exited, but GPU 0 still lists its 8.0 GiB" in r.stderr, r
    assert "not restarting onto GPU memory the last attempt still holds" in r.stderr, r
    assert "attempt 1" not in r.stdout, r


def test_a_process_of_someone_else_that_appears_during_the_job_is_named_before_the_restart(nvml, orphan):
    state, env = nvml
    seen = []
    remover = threading.Thread(target=release_after, args=(state, r"proc 0 \d+ ", 0.2, seen))
    remover.start()
    r = run(["--gpus", "0,1", "--nproc-per-node", "2", "--max-restarts", "1", HOLDER],
            env={**env, "FOREIGN_PID": str(orphan)}, timeout=60)
    remover.join()
    assert r.returncode == 0, r
    warnings = [l for l in r.stderr.splitlines() if "GPU memory in use" in l]
    assert len(warnings) == 1 and f"3.0 GiB of GPU 1 (NVIDIA H200) held by pid {orphan}" in warnings[0], r
    # not before the first attempt (it was not there yet): after attempt 0 ended
    assert r.stderr.index("GPU memory in use") > r.stderr.index("holds GPU 0") if "holds GPU 0" in r.stderr else True
    assert r.stdout.count("attempt 1 rank") == 2, r


def test_a_rank_that_dies_on_a_failing_gpu_has_it_named_in_the_report(nvml, tmp_path):
    state, env = nvml
    script = tmp_path / "xid.py"
    script.write_text(
        "import os, sys, time\n"
        "if os.environ['LOCAL_RANK'] == '1':\n"
        "    time.sleep(0.2)\n"
        "    open(os.environ['RANKRUN_FAKE_NVML'], 'w').write('gpu 0 name=NVIDIA_H200\\ngpu 1 name=NVIDIA_H200 error=15\\n')\n"
        "    print('CUDA error: unspecified launch failure', file=sys.stderr, flush=True)\n"
        "    sys.exit(1)\n"
        "time.sleep(30)\n")
    r = run(["--gpus", "0,1", "--nproc-per-node", "2", script], env=env, timeout=60)
    assert r.returncode == 1, r
    root = r.stderr[r.stderr.index("Root cause: rank 1"):]
    assert "CUDA error: unspecified launch failure" in root, r
    assert "its GPU: GPU 1 (NVIDIA H200): NVML cannot use it: GPU is lost" in root or \
        "its GPU: GPU 1: NVML cannot use it: GPU is lost" in root, r


def start_node(node_rank, port, state, extra, tmp):
    env = dict(os.environ, PYTHON_EXEC=PYTHON, SLEEP="0", TMPDIR=str(tmp), RANKRUN_NVML_LIBRARY=str(FAKE_NVML),
               RANKRUN_FAKE_NVML=str(state))
    env.pop("CUDA_VISIBLE_DEVICES", None)
    tmp.mkdir(exist_ok=True)
    return subprocess.Popen([str(RANKRUN), f"--node-rank={node_rank}", "--nproc-per-node=1", "--nnodes=2", "--gpus=0",
                             "--master-addr=127.0.0.1", f"--master-port={port}", "--rdzv-conf=timeout=30", *extra,
                             str(SCRIPTS / "mn_fail.py")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


@pytest.mark.parametrize("mode", ["warn", "refuse"])
def test_every_node_checks_its_own_gpus_and_says_which_node(tmp_path, orphan, mode):
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    clean, held = tmp_path / "n0.state", tmp_path / "n1.state"
    clean.write_text("gpu 0 name=NVIDIA_H200\n")
    held.write_text(f"gpu 0 name=NVIDIA_H200\nproc 0 {orphan} {GIB8}\n")
    procs = [start_node(0, port, clean, ["--gpu-check", mode], tmp_path / "n0"),
             start_node(1, port, held, ["--gpu-check", mode], tmp_path / "n1")]
    results = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            pytest.fail("a node did not finish")
        results.append((p.returncode, out, err))
    (code0, out0, err0), (code1, out1, err1) = results
    host = socket.gethostname()
    assert f"node 1 ({host}): GPU memory in use: 8.0 GiB of GPU 0 (NVIDIA H200) held by pid {orphan}" in err1, err1
    assert "GPU memory in use" not in err0, err0
    if mode == "warn":
        assert (code0, code1) == (0, 0), (err0, err1)
    else:
        # the job ends on every node before any worker starts, naming the node and the process
        assert code1 == 2 and code0 == 121, (err0, err1)
        for err in (err0, err1):
            assert f"node 1 failed its checks: GPU 0 memory: 8.0 GiB of GPU 0 (NVIDIA H200) held by pid {orphan}" in err, err
        assert "ready rank" not in out0 + out1
