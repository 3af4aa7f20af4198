"""Shared fixtures for process-level tests: the built binaries and a runner with a deadline."""
import os
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("RANKRUN_BUILD_DIR", ROOT / "build"))
RANKRUN = BUILD / "launcher" / "rankrun"
HELPER = BUILD / "tests" / "helpers" / "worker_helper"
# Debian's interpreter, the one that sees python3-torch (the first python3 on PATH may not).
PYTHON = os.environ.get("RANKRUN_TEST_PYTHON", "/usr/bin/python3")
SCRIPTS = Path(__file__).resolve().parent / "scripts"


_CAN_IMPORT = {}


def can_import(modules):
    """Whether PYTHON imports `modules` ("torch.distributed", "transformers, accelerate"); asked once."""
    if modules not in _CAN_IMPORT:
        try:
            _CAN_IMPORT[modules] = subprocess.run([PYTHON, "-c", f"import {modules}"], capture_output=True,
                                                  timeout=120).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            _CAN_IMPORT[modules] = False
    return _CAN_IMPORT[modules]


def have_torch():
    return can_import("torch.distributed")


def torch_version():
    """The PyTorch the tests run (the workers' and the scripts' interpreter, PYTHON), as (major, minor)."""
    out = subprocess.run([PYTHON, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True,
                         timeout=60).stdout.strip()
    m = re.match(r"(\d+)\.(\d+)", out)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def torch_only(test):
    """A test that runs PyTorch (through PYTHON): skipped without it, and marked `torch`, so that
    `-m torch` runs it again with another torch (RANKRUN_TEST_PYTHON=tests/helpers/torch-python,
    RANKRUN_TORCH_ROOT=<a root of tools/torch-root.sh>): make test's second pass, make test-torch."""
    return pytest.mark.torch(pytest.mark.skipif(not have_torch(), reason=f"PyTorch is not importable by {PYTHON}")(test))


_FLIGHT_RECORDER = {}


def has_flight_recorder():
    """Whether PYTHON's torch has the generic flight recorder (torch 2.8 or later), which rankrun
    turns on and reads in its workers; asked once."""
    if "answer" not in _FLIGHT_RECORDER:
        code = "import torch._C._distributed_c10d as c; raise SystemExit(0 if hasattr(c, '_dump_fr_trace_json') else 1)"
        try:
            _FLIGHT_RECORDER["answer"] = have_torch() and subprocess.run([PYTHON, "-c", code], capture_output=True,
                                                                         timeout=120).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            _FLIGHT_RECORDER["answer"] = False
    return _FLIGHT_RECORDER["answer"]


TORCH_TESTS = [pytest.mark.torch, pytest.mark.skipif(not have_torch(), reason="PyTorch is not importable")]


class Result:
    def __init__(self, proc, out, err):
        self.returncode = proc.returncode
        self.stdout = out
        self.stderr = err

    def lines(self, rank):
        """The lines rank `rank` printed to stdout, prefix removed."""
        prefix = f"[{rank}] "
        return [l[len(prefix):] for l in self.stdout.splitlines() if l.startswith(prefix)]

    def err_lines(self, rank):
        prefix = f"[{rank}] "
        return [l[len(prefix):] for l in self.stderr.splitlines() if l.startswith(prefix)]

    def env_of(self, rank):
        return dict(l.split("=", 1) for l in self.lines(rank) if "=" in l)

    def __repr__(self):
        return f"rc={self.returncode}\n--- stdout ---\n{self.stdout}\n--- stderr ---\n{self.stderr}"


def run(args, env=None, timeout=60, **kw):
    full_env = dict(os.environ)
    full_env.pop("CUDA_VISIBLE_DEVICES", None)
    full_env.setdefault("PYTHON_EXEC", PYTHON)
    if env:
        full_env.update(env)
    proc = subprocess.Popen([str(RANKRUN), *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=full_env, text=True, **kw)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"rankrun did not finish in {timeout}s\n{out}\n{err}")
    return Result(proc, out, err)


class Running:
    """rankrun started in the background, for signal tests."""

    def __init__(self, args, env=None):
        full_env = dict(os.environ)
        full_env.pop("CUDA_VISIBLE_DEVICES", None)
        full_env.setdefault("PYTHON_EXEC", PYTHON)
        if env:
            full_env.update(env)
        self.proc = subprocess.Popen([str(RANKRUN), *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     env=full_env, text=True)
        self.seen = []
        self.seen_err = []

    def wait_for_lines(self, pattern, count, timeout=30):
        deadline = time.monotonic() + timeout
        rx = re.compile(pattern)
        hits = 0
        while hits < count:
            assert time.monotonic() < deadline, f"only {hits} of {count} lines matching {pattern!r}: {self.seen}"
            line = self.proc.stdout.readline()
            if not line:
                assert False, f"rankrun's stdout closed early: {self.seen}"
            self.seen.append(line)
            if rx.search(line):
                hits += 1

    def wait_for_stderr(self, pattern, timeout=30):
        """The first stderr line matching `pattern`. At the deadline rankrun gets SIGTERM (its
        stderr then ends), so a line that never comes fails the test instead of blocking it."""
        rx = re.compile(pattern)
        watchdog = threading.Timer(timeout, lambda: self.proc.poll() is None and self.proc.send_signal(signal.SIGTERM))
        watchdog.start()
        try:
            for line in iter(self.proc.stderr.readline, ""):
                self.seen_err.append(line)
                if rx.search(line):
                    return line
        finally:
            watchdog.cancel()
        assert False, f"no stderr line matching {pattern!r} within {timeout}s: {''.join(self.seen_err)}"

    def signal(self, signo):
        self.proc.send_signal(signo)

    def finish(self, timeout=60):
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate()
            pytest.fail(f"rankrun did not finish in {timeout}s\n{out}\n{err}")
        return Result(self.proc, "".join(self.seen) + out, "".join(self.seen_err) + err)


def pids_alive(pids):
    """The pids whose processes still run: not reaped, and not a zombie whose every thread has
    exited (a leader that exits before its other threads shows "Z" while they still run)."""
    alive = []
    for pid in pids:
        try:
            threads = len(os.listdir(f"/proc/{pid}/task"))
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
            if state != "Z" or threads > 1:
                alive.append(pid)
        except FileNotFoundError:
            pass
    return alive


def pidfds_held(launcher_pid):
    """The pids of which process `launcher_pid` holds a pidfd (its /proc fdinfo "Pid:" lines)."""
    held = set()
    try:
        for fd in os.listdir(f"/proc/{launcher_pid}/fdinfo"):
            try:
                with open(f"/proc/{launcher_pid}/fdinfo/{fd}") as f:
                    m = re.search(r"^Pid:\s+(\d+)$", f.read(), re.M)
            except OSError:
                continue
            if m:
                held.add(int(m.group(1)))
    except OSError:
        pass
    return held


def wait_for_pidfds(launcher_pid, pids, timeout=30):
    """Until rankrun (`launcher_pid`) holds a pidfd of every worker in `pids`: it has finished
    starting them, and sees their exits in order from then on."""
    deadline = time.monotonic() + timeout
    while not set(pids) <= pidfds_held(launcher_pid):
        assert time.monotonic() < deadline, f"rankrun holds no pidfd of {set(pids) - pidfds_held(launcher_pid)}"
        time.sleep(0.005)


__all__ = ["RANKRUN", "HELPER", "PYTHON", "SCRIPTS", "run", "Running", "have_torch", "pids_alive", "pidfds_held", "wait_for_pidfds", "signal"]
