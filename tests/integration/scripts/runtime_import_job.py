"""A worker that uses rankrun's Python runtime as installed beside the rankrun that started it
(test_install.py, test_package.py): a shard, a batch count agreed over rankrun's store (no torch
needed), a step; one line per rank."""
import os
import sys

import rankrun
import rankrun.data
import rankrun.progress

sampler = rankrun.data.DistributedSampler(10, seed=3)
counts = len(list(rankrun.data.even_batches(range(2 + sampler.rank))))
rankrun.progress.step()
print(f"rank {sampler.rank} python {sys.version_info[0]}.{sys.version_info[1]} rankrun {rankrun.__version__} "
      f"shard {','.join(map(str, sorted(sampler)))} even {counts} library {os.environ.get('RANKRUN_WORKER_LIBRARY')}",
      flush=True)
