"""Data for distributed training with the same number of batches on every rank, by construction.

    from rankrun.data import DistributedSampler, BucketSampler, even_batches

    sampler = DistributedSampler(dataset, shuffle=True, seed=0)           # as torch's, same arguments
    loader = DataLoader(dataset, batch_size=32, sampler=sampler, num_workers=4)

    buckets = BucketSampler(lengths, boundaries=[64, 256], batch_sizes=[64, 16, 4])
    loader = DataLoader(dataset, batch_sampler=buckets, num_workers=4)

    for epoch in range(epochs):
        sampler.set_epoch(epoch)                                          # same value on every rank
        for batch in even_batches(loader):                                # any source of batches
            ...

The samplers' plans are the C++ worker runtime's (rankrun::DistributedSampler,
rankrun::BucketSampler), computed by librankrun_worker itself: a C++ trainer and a Python one given
the same arguments read the same indices. num_replicas and rank default to the process group when
torch.distributed is initialised, else to WORLD_SIZE and RANK, else to a world of one.
"""

import array
import ctypes
import itertools
import os
import struct
import sys
import threading

from rankrun import _native

__all__ = ["DistributedSampler", "BucketSampler", "even_batches", "EvenBatches"]


def _world(num_replicas, rank):
    if num_replicas is None or rank is None:
        dist = sys.modules.get("torch.distributed")
        if dist is not None and dist.is_available() and dist.is_initialized():
            world, me = dist.get_world_size(), dist.get_rank()
        else:
            world = int(os.environ.get("WORLD_SIZE", "1") or 1)
            me = int(os.environ.get("RANK", "0") or 0)
        num_replicas = world if num_replicas is None else num_replicas
        rank = me if rank is None else rank
    if not isinstance(num_replicas, int) or num_replicas < 1:
        raise ValueError(f"num_replicas={num_replicas!r}; give the number of ranks (at least 1)")
    if not isinstance(rank, int) or not 0 <= rank < num_replicas:
        raise ValueError(f"rank={rank!r}; it must be in [0, {num_replicas - 1}] for num_replicas={num_replicas}")
    return num_replicas, rank


def _count(what, value):
    if not isinstance(value, int) or value < 0:
        raise ValueError(f"{what}={value!r}; give a whole number, 0 or more")
    return value


class DistributedSampler:
    """torch.utils.data.DistributedSampler's contract: this rank's share of `dataset` (or of
    range(dataset) when it is an int), the same number of samples on every rank; padded by
    repeating samples from the start of the epoch's order, or with `drop_last` cut to
    len(dataset) // num_replicas. Call set_epoch(epoch) at every epoch, with the same value on
    every rank. The order is rankrun's (SplitMix64), not torch's randperm."""

    def __init__(self, dataset, num_replicas=None, rank=None, shuffle=True, seed=0, drop_last=False):
        self.dataset_size = _count("len(dataset)", dataset if isinstance(dataset, int) else len(dataset))
        self.num_replicas, self.rank = _world(num_replicas, rank)
        self.shuffle = bool(shuffle)
        self.seed = int(seed)
        self.drop_last = bool(drop_last)
        self.epoch = 0
        if self.drop_last:
            self.num_samples = self.dataset_size // self.num_replicas
        else:
            self.num_samples = -(-self.dataset_size // self.num_replicas)
        self.total_size = self.num_samples * self.num_replicas

    def set_epoch(self, epoch):
        self.epoch = _count("epoch", int(epoch))

    def indices(self, epoch=None):
        """This rank's indices in `epoch` (the current one by default), in reading order."""
        return _native.plan_distributed(self.dataset_size, self.num_replicas, self.rank, self.shuffle, self.seed,
                                        self.epoch if epoch is None else epoch, self.drop_last)

    def __iter__(self):
        return iter(self.indices())

    def __len__(self):
        return self.num_samples


def _u64_array(what, values):
    try:
        return array.array("Q", values)
    except (TypeError, OverflowError):
        raise ValueError(f"{what}: give whole numbers, 0 or more") from None


class BucketSampler:
    """A batch sampler (DataLoader(batch_sampler=...)) for samples of very uneven lengths: sample i
    goes to bucket b when boundaries[b-1] <= lengths[i] < boundaries[b]; bucket b's batches hold at
    most batch_sizes[b] samples. The whole epoch is planned alike on every rank and dealt in rounds
    of num_replicas batches of one bucket, so every rank gets the same number of batches (len(),
    the same in every epoch) and at each step all ranks read batches of the same bucket. Without
    `drop_last`, a bucket's short last batch is kept and a bucket whose batches do not divide by
    num_replicas repeats its first ones; with it, both are dropped and no sample is read twice."""

    def __init__(self, lengths, boundaries, batch_sizes, num_replicas=None, rank=None, shuffle=True, seed=0,
                 drop_last=False):
        self.lengths = _u64_array("lengths", lengths)
        self.boundaries = _u64_array("boundaries", boundaries)
        self.batch_sizes = _u64_array("batch_sizes", batch_sizes)
        self.num_replicas, self.rank = _world(num_replicas, rank)
        self.shuffle = bool(shuffle)
        self.seed = int(seed)
        self.drop_last = bool(drop_last)
        self.epoch = 0
        self._plan = None  # (epoch, indices, offsets)

    def set_epoch(self, epoch):
        self.epoch = _count("epoch", int(epoch))

    def _planned(self, epoch):
        if self._plan is None or self._plan[0] != epoch:
            indices, offsets = _native.plan_buckets(self.lengths, self.boundaries, self.batch_sizes,
                                                    self.num_replicas, self.rank, self.shuffle, self.seed, epoch,
                                                    self.drop_last)
            self._plan = (epoch, indices, offsets)
        return self._plan

    def batches(self, epoch=None):
        """This rank's batches in `epoch` (the current one by default), each a list of indices."""
        _, indices, offsets = self._planned(self.epoch if epoch is None else epoch)
        return [indices[offsets[b]:offsets[b + 1]] for b in range(len(offsets) - 1)]

    def __iter__(self):
        from rankrun import progress

        epoch = self.epoch
        _, indices, offsets = self._planned(epoch)
        planned = len(offsets) - 1
        progress._batches(epoch, 0, planned)
        for b in range(planned):
            yield indices[offsets[b]:offsets[b + 1]]
            progress._batches(epoch, b + 1, planned)

    def __len__(self):
        return len(self._planned(self.epoch)[2]) - 1

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_plan"] = None  # a DataLoader worker that needs it plans again
        return state


_POLICIES = ("shortest", "longest")


class _Agreement:
    """Every rank's numbers, gathered: over the process group when torch.distributed is
    initialised, else over rankrun's store (the runtime's all_gather), else this rank's alone."""

    def __init__(self, group):
        self.group = group
        self.calls = 0
        self.buffers = None
        self.flag = None

    def gather(self, values):
        self.calls += 1
        dist = sys.modules.get("torch.distributed")
        if dist is not None and dist.is_available() and dist.is_initialized():
            import torch

            device = "cpu"
            if dist.get_backend(self.group) == "nccl":
                device = torch.device("cuda", torch.cuda.current_device())
            world = dist.get_world_size(self.group)
            # The tensors live as long as this object: the process group's thread may drop the
            # last reference to a collective's tensors, and with torch 1.13 that waits for the
            # interpreter lock, which a main thread tearing the group down holds (a deadlock at
            # exit). Reused, they also cost no allocation per batch.
            key = (str(device), world, len(values))
            if self.buffers is None or self.buffers[0] != key:
                mine = torch.zeros(len(values), dtype=torch.int64, device=device)
                self.buffers = (key, mine, [torch.zeros_like(mine) for _ in range(world)])
            _, mine, out = self.buffers
            mine.copy_(torch.tensor(values, dtype=torch.int64))
            dist.all_gather(out, mine, group=self.group)
            return [t.tolist() for t in out]
        world = int(os.environ.get("WORLD_SIZE", "1") or 1)
        if world <= 1:
            return [list(values)]
        return self._gather_in_store(values, world)

    def extreme(self, value, largest):
        """The smallest (or largest) of every rank's `value`: one all_reduce of one number over the
        process group, in place on a tensor this object keeps; over the store, a gather."""
        dist = sys.modules.get("torch.distributed")
        if dist is not None and dist.is_available() and dist.is_initialized():
            import torch

            if self.flag is None:
                device = "cpu"
                if dist.get_backend(self.group) == "nccl":
                    device = torch.device("cuda", torch.cuda.current_device())
                self.flag = torch.zeros(1, dtype=torch.int64, device=device)
            self.calls += 1
            self.flag.fill_(value)
            dist.all_reduce(self.flag, op=dist.ReduceOp.MAX if largest else dist.ReduceOp.MIN, group=self.group)
            return int(self.flag.item())
        values = [v[0] for v in self.gather([value])]
        return max(values) if largest else min(values)

    def _gather_in_store(self, values, world):
        lib = _native.lib()
        session = _store_session()
        payload = struct.pack(f"<{len(values)}q", *values)
        out = ctypes.create_string_buffer(len(payload) * world)
        name = f"rankrun.data.even_batches #{next(_STORE_CALLS)}".encode()
        if lib.rankrun_worker_all_gather(session, name, payload, len(payload), out, 0) != 0:
            raise RuntimeError("rankrun.data.even_batches: " +
                               lib.rankrun_worker_last_error(session).decode(errors="replace"))
        n = len(values)
        flat = struct.unpack(f"<{n * world}q", out.raw)
        return [list(flat[r * n:(r + 1) * n]) for r in range(world)]


# One session on rankrun's store per process, for every even_batches of it: the runtime numbers
# its collectives per session, and the ranks' calls must meet in the same order.
_STORE_LOCK = threading.Lock()
_STORE = None
_STORE_CALLS = itertools.count(1)


def _forked():
    global _STORE
    _STORE = None  # a child of a fork makes its own connection, if it gathers at all


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)


def _store_session():
    global _STORE
    with _STORE_LOCK:
        if _STORE is None:
            lib = _native.lib()
            handle = ctypes.c_void_p()
            err = _native.error_buffer()
            if lib.rankrun_worker_create(ctypes.byref(handle), -1, err, len(err)) != 0:
                raise RuntimeError("rankrun.data.even_batches: " + err.value.decode(errors="replace"))
            _STORE = handle
        return _STORE


class EvenBatches:
    """What even_batches() returns: iterate it once per epoch."""

    def __init__(self, batches, policy="shortest", group=None):
        if policy not in _POLICIES:
            raise ValueError(f"even_batches: policy={policy!r}; give 'shortest' (every rank stops at the smallest "
                             "count) or 'longest' (ranks with fewer batches repeat theirs up to the largest count)")
        self.source = batches
        self.policy = policy
        self.epoch = -1
        self.counts = None  # every rank's own count in the last epoch whose counts were known ahead
        self._length = None
        self._agreement = _Agreement(group)

    def set_epoch(self, epoch):
        """The epoch the next iteration is (counted from 0 by iteration otherwise); passed on to the
        source's set_epoch and its sampler's, if they have one."""
        self.epoch = int(epoch) - 1
        for target in (self.source, getattr(self.source, "sampler", None), getattr(self.source, "batch_sampler", None)):
            if target is not None and callable(getattr(target, "set_epoch", None)):
                target.set_epoch(epoch)

    def __len__(self):
        if self._length is None:
            raise TypeError("even_batches: the number of batches is agreed when an epoch starts; len() is known once "
                            "iteration has begun")
        return self._length

    def __iter__(self):
        from rankrun import progress

        self.epoch += 1
        epoch = self.epoch
        try:
            own = len(self.source)
        except TypeError:
            own = None
        # Every rank must take the same path: ranks with and without a length agree on that first.
        known = self._agreement.gather([-1 if own is None else own])
        counts = [c[0] for c in known]
        if all(c >= 0 for c in counts):
            self.counts = counts
            target = min(counts) if self.policy == "shortest" else max(counts)
            self._length = target
            yield from self._known(target, epoch, progress)
        else:
            self.counts = None
            self._length = None
            yield from self._unknown(epoch, progress)

    def _known(self, target, epoch, progress):
        progress._batches(epoch, 0, target)
        read = 0
        while read < target:
            got = 0
            for batch in self.source:
                if read == target:
                    break
                yield batch
                read += 1
                got += 1
                progress._batches(epoch, read, target)
            if read < target and got == 0:
                raise RuntimeError(f"even_batches: this rank's source gave no batch in epoch {epoch}, and "
                                   f"policy='longest' needs {target}: give every rank at least one batch")

    def _unknown(self, epoch, progress):
        # No length ahead: the ranks agree before each batch (one all_reduce of one number per
        # batch). 'shortest': go on while every rank has a batch. 'longest': go on while some rank
        # has not yet been through its data once; a rank that has repeats its source.
        iterator = iter(self.source)
        read = 0
        through = False  # this rank has been through its data once
        progress._batches(epoch, 0, 0)
        while True:
            try:
                batch = next(iterator)
            except StopIteration:
                batch, through = None, True
            if self.policy == "shortest":
                if not self._agreement.extreme(0 if batch is None else 1, largest=False):
                    return
            else:
                if not self._agreement.extreme(0 if through else 1, largest=True):
                    return
                if batch is None:
                    iterator = iter(self.source)
                    try:
                        batch = next(iterator)
                    except StopIteration:
                        raise RuntimeError(f"even_batches: this rank's source gave no batch in epoch {epoch}, and "
                                           "policy='longest' repeats it: give every rank at least one batch") from None
            yield batch
            read += 1
            progress._batches(epoch, read, 0)


def even_batches(batches, policy="shortest", group=None):
    """Wraps a per-rank source of batches (a DataLoader, a generator function's iterable, any
    object that iter() takes, once per epoch) so that every rank yields the same number in each
    epoch, and a rank that runs out never leaves the others waiting in a collective.

    policy='shortest': every rank stops at the smallest rank's count (the other ranks' extra
    batches of that epoch are not read). policy='longest': every rank goes on to the largest
    count, a rank that runs out starting its source again from the beginning.

    The counts are agreed once per epoch when every rank's source has a len(): one all_gather of
    one number over the process group (`group`, the default group when None), or over rankrun's
    store when torch.distributed is not initialised. A source without len() (a generator, an
    IterableDataset's loader) is agreed on batch by batch: before each batch every rank says
    whether it has one (one all_reduce of one number per batch). Each rank's count reaches
    rankrun, whose hang report gives it."""
    return EvenBatches(batches, policy=policy, group=group)
