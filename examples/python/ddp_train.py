#!/usr/bin/env python3
"""DDP training on rankrun's Python runtime: bucketed batches, the same number on every rank by
construction, and progress rankrun sees.

    rankrun --nproc-per-node=4 examples/python/ddp_train.py --epochs 2
    rankrun status                      # from another shell: each rank's step and steps per second

The data set is 2,000 "sentences" of 1 to 64 tokens. rankrun.data.BucketSampler groups them by
length (four buckets, smaller batches for longer sentences), plans the whole epoch alike on every
rank and deals it out so that every rank gets the same number of batches and, at each step, a
batch of the same bucket (similar work per step). rankrun.data.even_batches() wraps the loader:
with BucketSampler it changes nothing, but it makes any source of batches safe (a hand-written
one, an IterableDataset). rankrun.progress.step() tells rankrun each rank's step; the checkpoint
runs inside rankrun.progress.section(), so that a slow save is not taken for a hang.

Runs with gloo on CPUs (the default here) or NCCL on GPUs (--backend nccl). --record FILE writes
what each rank read, for the tests.
"""
import argparse
import json
import os
import tempfile
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset

import rankrun.data
import rankrun.progress

BOUNDARIES = [16, 32, 48]          # buckets: 1-15, 16-31, 32-47, 48-64 tokens
BATCH_SIZES = [32, 16, 8, 4]       # longer sentences, smaller batches


class Sentences(Dataset):
    """Sample i: a sentence of lengths[i] tokens, as 8 features of its tokens and a target."""

    def __init__(self, n, seed):
        g = torch.Generator().manual_seed(seed)
        self.lengths = torch.randint(1, 65, (n,), generator=g).tolist()

    def __len__(self):
        return len(self.lengths)

    def __getitem__(self, i):
        tokens = (torch.arange(self.lengths[i], dtype=torch.float32) + i) / len(self.lengths)
        features = torch.stack([tokens.mean(), tokens.std() if len(tokens) > 1 else tokens[0] * 0, tokens.min(),
                                tokens.max(), torch.tensor(len(tokens) / 64), tokens.sum() / 64,
                                torch.tensor(float(i % 7)), torch.tensor(1.0)])
        return i, features, features.sum() / 100


def collate(items):
    indices = [i for i, _, _ in items]
    return indices, torch.stack([x for _, x, _ in items]), torch.stack([y for _, _, y in items])


def bucket_of(length):
    return sum(length >= b for b in BOUNDARIES)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=2, help="DataLoader worker processes")
    parser.add_argument("--drop-last", action="store_true")
    parser.add_argument("--backend", default="gloo")
    parser.add_argument("--step-seconds", type=float, default=0.0, help="extra time per step (to watch it)")
    parser.add_argument("--record", help="write each rank's batches (indices, buckets) to FILE.<rank>.json")
    args = parser.parse_args()

    dist.init_process_group(args.backend)
    rank = dist.get_rank()
    device = torch.device("cuda", 0) if args.backend == "nccl" else torch.device("cpu")
    data = Sentences(args.samples, seed=1)
    sampler = rankrun.data.BucketSampler(data.lengths, BOUNDARIES, BATCH_SIZES, seed=7, drop_last=args.drop_last)
    loader = DataLoader(data, batch_sampler=sampler, collate_fn=collate, num_workers=args.workers,
                        persistent_workers=args.workers > 0)
    batches = rankrun.data.even_batches(loader)
    model = DistributedDataParallel(torch.nn.Linear(8, 1).to(device))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    record = {"rank": rank, "world_size": dist.get_world_size(), "batches_per_epoch": len(sampler), "epochs": []}

    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        read = {"indices": [], "buckets": []}
        for indices, x, y in batches:
            loss = torch.nn.functional.mse_loss(model(x.to(device)).squeeze(1), y.to(device))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            rankrun.progress.step()
            read["indices"].append(indices)
            read["buckets"].append(bucket_of(data.lengths[indices[0]]))
            if args.step_seconds:
                time.sleep(args.step_seconds)
        record["epochs"].append(read)
        with rankrun.progress.section("checkpoint", timeout=600):
            if rank == 0:
                with tempfile.TemporaryDirectory() as tmp:
                    torch.save(model.module.state_dict(), os.path.join(tmp, f"epoch{epoch}.pt"))
        dist.barrier()
        if rank == 0:
            print(f"epoch {epoch}: {len(read['indices'])} batches on every rank, loss {loss.item():.4f}", flush=True)

    if args.record:
        with open(f"{args.record}.{rank}.json", "w") as f:
            json.dump(record, f)
    # The model before the group: torch 1.13 can deadlock tearing down a gloo group that DDP still holds.
    del model, optimizer
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
