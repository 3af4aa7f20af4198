"""What the benchmarks of bench/ share: where a build tree keeps its executables, the figures'
formats, the servers they start and stop, reads of /proc, the network namespaces' module.

The benchmarks run as `/usr/bin/python3 bench/NAME.py`, so this module is found beside them
(sys.path[0] is the script's folder).
"""
import atexit
import itertools
import os
import resource
import signal
import statistics
import subprocess
import sys
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = "/usr/bin/python3"  # Debian's, with its torch: the benchmarks' workers and torchrun

# Where a build tree keeps the executables the benchmarks run.
BUILT = {
    "rankrun": ("launcher", "rankrun"),
    "rankrun-store": ("rendezvous", "rankrun-store"),
    "store_loadgen": ("bench", "store_loadgen"),
    "rankrun_elastic_bench": ("bench", "rankrun_elastic_bench"),
}


def built(build_dir, name):
    """The path of executable `name` (a key of BUILT) in the build tree `build_dir`."""
    return os.path.join(str(build_dir), *BUILT[name])


def require_built(paths, hint):
    """SystemExit naming the first of `paths` that is not an executable, with `hint` (what to build)."""
    for path in paths:
        if not os.access(path, os.X_OK):
            raise SystemExit(f"{path} missing: {hint}")


# --- output ------------------------------------------------------------------------------------


def log(msg):
    """A progress line on stderr (stdout holds the tables)."""
    print(f"# {msg}", file=sys.stderr, flush=True)


def fmt(samples, scale=1.0, digits=0):
    """median (min-max) of samples, each times `scale`, with `digits` decimals; one sample alone;
    '-' for none."""
    if not samples:
        return "-"
    v = [s * scale for s in samples]
    f = f"{{:.{digits}f}}"
    if len(v) == 1:
        return f.format(v[0])
    return f"{f.format(statistics.median(v))} ({f.format(min(v))}-{f.format(max(v))})"


def middle(values):
    """The middle one of `values` sorted (of an even count, the higher of the two middle ones)."""
    return sorted(values)[len(values) // 2]


def table(title, columns, rows):
    """A Markdown table after a blank line, its title and a blank line."""
    print(f"\n{title}\n")
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for row in rows:
        print("| " + " | ".join(row) + " |")


# --- torch ---------------------------------------------------------------------------------------


def have_torch_run():
    """Whether PY imports torch.distributed.run (torchrun, and torch's agents)."""
    return subprocess.run([PY, "-c", "import torch.distributed.run"], capture_output=True).returncode == 0


# torch's own TCPStore server: libuv's where that torch was built with it (the wheels), else its
# legacy one. Run with `python -c`; says where it listens, and serves until its stdin closes.
TORCH_SERVER = """
import datetime, sys, torch.distributed as dist
args = ("127.0.0.1", 0, None, True, datetime.timedelta(seconds=600))
try:
    s = dist.TCPStore(*args, wait_for_workers=False, use_libuv=True)
except (TypeError, RuntimeError, ValueError):  # 1.13 has no use_libuv; a build without libuv says so
    try:
        s = dist.TCPStore(*args, wait_for_workers=False, use_libuv=False)
    except TypeError:
        s = dist.TCPStore(*args, wait_for_workers=False)
print("listening on 127.0.0.1:%d %s" % (s.port, "libuv" if getattr(s, "libuvBackend", False) else "legacy"), flush=True)
sys.stdin.read()
"""


# --- servers and processes -----------------------------------------------------------------------

# Every server started, stopped when this process exits however it exits (bar SIGKILL): each runs
# in a session of its own, so nothing else would.
STARTED = []


@atexit.register
def stop_leftovers():
    for proc in STARTED:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()


def start_server(cmd, env=None):
    """Starts a server that prints "listening on HOST:PORT [KIND]" (rankrun-store, TORCH_SERVER)
    in a session of its own; (its Popen, with .kind = KIND or "", and PORT)."""
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    STARTED.append(proc)
    while True:
        line = proc.stdout.readline()
        if not line or line.startswith("listening on "):
            break
    if not line.startswith("listening on "):
        proc.kill()
        raise SystemExit(f"server {' '.join(cmd[:3])} did not start")
    proc.kind = line.split()[3] if len(line.split()) > 3 else ""  # torch's server: "libuv" or "legacy"
    return proc, int(line.split()[2].rsplit(":", 1)[1])


def stop_server(proc):
    """Closes its stdin and SIGTERMs it; SIGKILLs its session after 20 s."""
    proc.stdin.close()
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        proc.wait()


def sigterm_as_interrupt():
    """SIGTERM raises KeyboardInterrupt, so that a run stopped either way cleans up alike."""

    def on_term(signo, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)


def port_counter(after):
    """A function returning after + 1, after + 2, ...: a fresh port for each job."""
    ports = itertools.count(after + 1)
    return lambda: next(ports)


def raise_nofile():
    """Raises RLIMIT_NOFILE's soft limit to the hard one (65536 where that is unlimited);
    (the soft limit before, the soft limit now, the hard limit). Children inherit it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard if hard != resource.RLIM_INFINITY else 1 << 16
    if soft != want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    return soft, want, hard


# --- /proc ---------------------------------------------------------------------------------------


def proc_stat(path):
    """The fields of a /proc/<pid>/stat (or task/<tid>/stat) after "(comm)": [0] is the state,
    [11] and [12] utime and stime, [13] and [14] the reaped children's (clock ticks).
    OSError when it is gone."""
    with open(path) as f:
        return f.read().rsplit(")", 1)[1].split()


def proc_status(pid):
    """/proc/<pid>/status as {field: value as written}; OSError when the process is gone."""
    with open(f"/proc/{pid}/status") as f:
        return dict(line.split(":", 1) for line in f.read().splitlines() if ":" in line)


def kib(status, field):
    """A size field of proc_status() (VmHWM, VmRSS: "123 kB") in KiB; None where it has none
    (a zombie has no memory fields)."""
    value = status.get(field)
    return None if value is None else int(value.split()[0])


# --- network namespaces ----------------------------------------------------------------------------


def import_netns():
    """tests/integration/netns.py, the tests' rig of network namespaces as hosts. It imports
    pytest, which Debian's python3 may lack: then a stand-in whose fail() and skip() raise a
    RuntimeError."""
    sys.path.insert(0, str(ROOT / "tests" / "integration"))
    try:
        import pytest  # noqa: F401
    except ImportError:

        class _Fail(RuntimeError):
            pass

        stub = types.ModuleType("pytest")
        stub.fixture = lambda f=None, **kw: f if f is not None else (lambda g: g)

        def _raise(msg="", **kw):
            raise _Fail(msg)

        stub.fail = stub.skip = _raise
        sys.modules["pytest"] = stub
    import netns

    return netns
