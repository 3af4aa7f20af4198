"""pytest configuration for the process-level tests: markers."""


def pytest_configure(config):
    config.addinivalue_line("markers", "slurm: runs jobs on a real Slurm cluster brought up by slurm_rig.py "
                                       "(root, slurmctld/slurmd/munge installed; skipped otherwise)")
