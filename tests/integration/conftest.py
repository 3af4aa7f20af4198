"""pytest configuration for the process-level tests: markers, and the exit code of a run in which
a test could not run (--skipped-exit-code, given by the runs that CTest starts)."""

import os
import resource
import time

import _pytest.assertion.rewrite as _rewrite
import pytest

_skipped = []  # the node ids of the tests skipped in this run

# `assert ok, result`: pytest shows a message that is not a string through saferepr, cut to 240
# characters, which leaves out the job's stderr, where rankrun says why. Shown whole instead (and
# make test sets CI=1, so that pytest does not cut the explanation to 8 lines either).
if hasattr(_rewrite, "_format_assertmsg"):
    _format_assertmsg = _rewrite._format_assertmsg
    _rewrite._format_assertmsg = lambda obj: _format_assertmsg(obj if isinstance(obj, str) else repr(obj))


def pytest_addoption(parser):
    parser.addoption("--skipped-exit-code", type=int, default=None, metavar="CODE",
                     help="exit with CODE when no test failed and at least one was skipped, so that CTest "
                          "(SKIP_RETURN_CODE) reports the run as skipped, not passed")


def pytest_configure(config):
    config.addinivalue_line("markers", "slurm: runs jobs on a real Slurm cluster brought up by slurm_rig.py "
                                       "(root, slurmctld/slurmd/munge installed; skipped otherwise)")
    config.addinivalue_line("markers", "torch: runs PyTorch; make test runs it with Debian 12's torch 1.13, make "
                                       "test-torch with 1.13, 2.6 and 2.14 (tests/helpers/torch-python)")
    config.addinivalue_line("markers", "torch_commit: of the torch tests, one that make test runs again with "
                                       "torch 2.14 (the others run with 2.14 in make test-torch only)")
    config.addinivalue_line("markers", "slow: waits minutes for a default timeout; make test leaves it out, "
                                       "make test-slow and make test-torch run it")


def pytest_runtest_logreport(report):
    # A skip (pytest.skip, skipif, a fixture that skips), not an expected failure.
    if report.skipped and not hasattr(report, "wasxfail"):
        _skipped.append(report.nodeid)


def pytest_sessionfinish(session, exitstatus):
    code = session.config.getoption("--skipped-exit-code")
    if code is not None and exitstatus == 0 and _skipped:
        session.exitstatus = code


def _cpu(who):
    u = resource.getrusage(who)
    return u.ru_utime + u.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """RANKRUN_TEST_CPU=FILE: one line per test appended to FILE (every pytest worker's), its wall
    time and the CPU time of the processes it started and reaped (rankrun, its workers, the
    namespace nodes' launchers) and of the pytest process itself, in seconds: which tests cost the
    cores their time (docs/testing.md)."""
    out = os.environ.get("RANKRUN_TEST_CPU")
    if not out:
        yield
        return
    t0, children0, self0 = time.monotonic(), _cpu(resource.RUSAGE_CHILDREN), _cpu(resource.RUSAGE_SELF)
    yield
    line = "{:.2f} {:.2f} {:.2f} {}\n".format(time.monotonic() - t0, _cpu(resource.RUSAGE_CHILDREN) - children0,
                                              _cpu(resource.RUSAGE_SELF) - self0, item.nodeid)
    fd = os.open(out, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)
