"""pytest configuration for the process-level tests: markers, and the exit code of a run in which
a test could not run (--skipped-exit-code, given by the runs that CTest starts)."""

import _pytest.assertion.rewrite as _rewrite

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
