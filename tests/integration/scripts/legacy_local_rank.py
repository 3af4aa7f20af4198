"""A legacy script: it takes its rank from --local_rank on argv (default 0), as scripts written
for torch.distributed.launch did, and never reads LOCAL_RANK. Under a launcher that sets only the
environment, every worker registers as rank 0 and the job hangs in init_process_group."""
import argparse
import os

import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--local_rank", type=int, default=0)
args = parser.parse_args()

print(f"joining as rank {args.local_rank}", flush=True)
dist.init_process_group("gloo", rank=args.local_rank, world_size=int(os.environ["WORLD_SIZE"]))
print("joined", flush=True)
dist.destroy_process_group()
