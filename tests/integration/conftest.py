"""pytest configuration for the process-level tests: markers."""


def pytest_configure(config):
    config.addinivalue_line("markers", "slurm: runs jobs on a real Slurm cluster brought up by slurm_rig.py "
                                       "(root, slurmctld/slurmd/munge installed; skipped otherwise)")
    config.addinivalue_line("markers", "torch: runs PyTorch; make test runs these again with torch 2.14 "
                                       "(tests/helpers/torch-python), make test-torch with 2.6 and 2.14")
    config.addinivalue_line("markers", "slow: waits minutes for a default timeout; make test leaves it out, "
                                       "make test-slow and make test-torch run it")
