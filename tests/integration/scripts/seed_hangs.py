"""The hangs of the field reports, on CPU with gloo, as rankrun starts them (env://: RANK,
WORLD_SIZE, MASTER_ADDR and MASTER_PORT come from rankrun). Run as `seed_hangs.py CASE [SECONDS]`
with two ranks. Every line where a rank is expected to block is marked
`# the blocking line: <case> rank <r>` (or `<case> every rank`; several on one line are separated by
`;`).

Seed 001, DDP with uneven inputs: rank r has NUM_INPUTS + r inputs, model DDP(Linear(1, 1)).
  ddp1 ... ddp6  the report's cases 1-6, line for line (join() or not, an extra barrier() or not),
                 then "Rank r has exhausted all n of its inputs!".

  How the script ends. The report's script returns from its worker right after that print. Under
  NCCL a rank that is gone leaves its peer waiting forever; under gloo its exit closes its
  sockets and a peer still waiting on it fails at once with "Connection closed by peer": the
  hang becomes an error. A real training script does not end with its last batch: it waits for
  the others before it leaves (rank 0 saves the final model behind that barrier) and then leaves
  the process group. So every ddp case, and nothing else, ends in the_end_of_training():
  dist.barrier(), then destroy_process_group(). A rank that is done therefore stays alive, in a
  collective, as it would in a real job. SEED_END=exit in the environment ends the way the
  report's script does (return, then exit) instead, to see what gloo makes of a peer that left.
  After destroy_process_group() the rank leaves with os._exit(0): with torch 1.13, freeing the
  DDP model frees the gloo process group, whose destructor joins gloo's thread while holding the
  interpreter lock, and that thread, freeing the join's last all_reduce tensor, waits for the lock
  (pytorch/pytorch#56297; 7 of 80 ddp1/ddp6 runs on a busy machine hung there for good, rank 0
  gone, rank 1 past its last print): a hang of torch's at exit, not the one the case is about.

Seed 002, a home-made data interface gives the ranks different batch counts (rank 0 has one
batch fewer); each batch is a forward/backward through DDP; at the epoch's end every rank
  epoch_allreduce  all_reduce()s the epoch loss,
  epoch_barrier    or waits in barrier(),
then goes on to epoch 2. The report: the job hangs at the end of the first epoch.

The hangs of the hang policy:
  never_init                   rank 1 sleeps 600 s before init_process_group; rank 0 waits there
  straggler_exits              rank 1 exits 0 early (2 s after a first all_reduce) while rank 0
                               waits in the next all_reduce(). Under gloo that is no hang: rank
                               0 fails at once with "Connection closed by peer" (NCCL would wait)
  straggler_exits_before_init  rank 1 exits 0 before init_process_group; rank 0 waits there, on
                               rankrun's store, which no exit closes: the hang stays a hang
  busy_silent                  every rank all_reduce()s a small tensor in a tight loop for
                               SECONDS (default 12), printing nothing, then prints "done", exit 0
  busy_silent_big              the same with a 16M-float tensor
  slow_checkpoint              a few steps; rank 0 writes a checkpoint (write + fsync into a
                               temporary file in $TMPDIR, in a loop) for SECONDS while the others
                               wait in barrier(); a few more steps; "done", exit 0
  slow_checkpoint_blocked      the same, but rank 0 is blocked outside any collective without CPU
                               (time.sleep, standing for a dead NFS server)
  own_master_port              the script sets MASTER_PORT itself (the seed 001 script does), to a
                               port nobody listens on: every rank retries its store connect in
                               init_process_group until torch's timeout (30 min)
  init_method_tcp              init_process_group(init_method="tcp://127.0.0.1:<free port>",
                               rank=, world_size=); rank 1 never calls it (sleeps 600 s): rank 0
                               waits in the rendezvous of a store that is not rankrun's. With
                               torch 2.14 it hosts that store and waits for rank 1 there; torch
                               1.13 and 2.6 under a launcher's store
                               (TORCHELASTIC_USE_AGENT_STORE=True) make every rank, rank 0 too, a
                               client of that address: rank 0 retries a connect nobody answers
  legacy_local_rank            a legacy script: argparse --local_rank (default 0) passed as rank=,
                               so every worker claims rank 0 when --local_rank is not on its argv
"""
import argparse
import os
import socket
import sys
import tempfile
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

case = sys.argv[1]
SECONDS = float(sys.argv[2]) if len(sys.argv) > 2 and not sys.argv[2].startswith("-") else 12.0
rank = int(os.environ["RANK"])


# --- seed 001: DDP with uneven inputs ---------------------------------------------------------

NUM_INPUTS = 5


def ddp1(model, inputs):
    num_inputs = 0
    with model.join():
        for input in inputs:
            num_inputs += 1
            loss = model(input)
            loss.backward()
    return num_inputs


def ddp2(model, inputs):
    num_inputs = 0
    for input in inputs:
        num_inputs += 1
        loss = model(input)
        loss.backward()  # the blocking line: ddp2 rank 1
    return num_inputs


def ddp3(model, inputs):
    num_inputs = 0
    for input in inputs:
        num_inputs += 1
        loss = model(input)
        loss.backward()  # the blocking line: ddp3 rank 1
        dist.barrier()
    return num_inputs


def ddp4(model, inputs):
    num_inputs = 0
    with model.join():  # the blocking line: ddp4 rank 0 (in join()'s __exit__)
        for input in inputs:
            num_inputs += 1
            loss = model(input)
            loss.backward()
            dist.barrier()  # the blocking line: ddp4 rank 1
    return num_inputs


def ddp5(model, inputs):
    num_inputs = 0
    for input in inputs:
        num_inputs += 1
        loss = model(input)
        loss.backward()  # the blocking line: ddp5 rank 1
    dist.barrier()  # the blocking line: ddp5 rank 0
    return num_inputs


def ddp6(model, inputs):
    num_inputs = 0
    with model.join():
        for input in inputs:
            num_inputs += 1
            loss = model(input).sum()
            loss.backward()
    dist.barrier()
    return num_inputs


def the_end_of_training():
    dist.barrier()  # the blocking line: ddp2 rank 0; ddp3 rank 0
    dist.destroy_process_group()


def uneven_inputs():
    dist.init_process_group("gloo")
    model = DDP(torch.nn.Linear(1, 1))
    # Rank 1 gets one more input than rank 0
    inputs = [torch.tensor([1]).float() for _ in range(NUM_INPUTS + rank)]
    num_inputs = globals()[case](model, inputs)
    print(f"Rank {rank} has exhausted all {num_inputs} of its inputs!", flush=True)
    if os.environ.get("SEED_END") != "exit":
        the_end_of_training()
        os._exit(0)  # before the model is freed (the docstring's end)


# --- seed 002: different batch counts, a hang at the end of the first epoch --------------------

BATCHES = 4


def train_one_batch(model, optimizer, batch):
    optimizer.zero_grad()
    loss = model(batch).pow(2).mean()
    loss.backward()  # the blocking line: epoch_allreduce rank 1; epoch_barrier rank 1
    optimizer.step()
    return loss.detach()


def uneven_epochs():
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(1, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    # the data interface splits the samples by hand: rank 0 gets one batch fewer
    batches = [torch.full((8, 1), float(i)) for i in range(BATCHES + rank)]
    for epoch in (1, 2):
        epoch_loss = torch.zeros(1)
        for batch in batches:
            epoch_loss += train_one_batch(model, optimizer, batch)
        if case == "epoch_allreduce":
            dist.all_reduce(epoch_loss)  # the blocking line: epoch_allreduce rank 0
        else:
            dist.barrier()  # the blocking line: epoch_barrier rank 0
        print(f"rank {rank}: epoch {epoch} done, loss {epoch_loss.item():.3f}", flush=True)
    dist.destroy_process_group()


# --- the hang policy's cases -------------------------------------------------------------------

def never_init():
    if rank == 1:
        time.sleep(600)  # the blocking line: never_init rank 1
    dist.init_process_group("gloo")  # the blocking line: never_init rank 0


def straggler_exits():
    dist.init_process_group("gloo")
    dist.all_reduce(torch.ones(1))
    print(f"rank {rank} past the first all_reduce", flush=True)
    if rank == 1:
        time.sleep(2)  # its last batches, while rank 0 already waits
        sys.exit(0)
    dist.all_reduce(torch.ones(1))  # the blocking line: straggler_exits rank 0


def straggler_exits_before_init():
    if rank == 1:
        sys.exit(0)
    dist.init_process_group("gloo")  # the blocking line: straggler_exits_before_init rank 0


def busy(numel):
    dist.init_process_group("gloo")
    data = torch.ones(numel)
    deadline = time.monotonic() + SECONDS
    while True:
        dist.all_reduce(data)
        data.fill_(1.0)
        # every rank stops after the same all_reduce: the first one past its deadline decides
        going_on = torch.tensor([1.0 if time.monotonic() < deadline else 0.0])
        dist.all_reduce(going_on, op=dist.ReduceOp.MIN)
        if going_on.item() == 0.0:
            break
    print("done", flush=True)
    dist.destroy_process_group()


def some_steps(model, optimizer, steps):
    for _ in range(steps):
        train_one_batch(model, optimizer, torch.ones(8, 1))


def write_checkpoint(seconds):
    chunk = os.urandom(1 << 20)
    deadline = time.monotonic() + seconds
    with tempfile.TemporaryFile() as f:  # in $TMPDIR
        while time.monotonic() < deadline:
            if f.tell() >= 64 << 20:
                f.seek(0)
            f.write(chunk)
            f.flush()
            os.fsync(f.fileno())


def write_checkpoint_to_a_dead_nfs_server(seconds):
    time.sleep(seconds)  # the blocking line: slow_checkpoint_blocked rank 0


def slow_checkpoint():
    dist.init_process_group("gloo")
    model = DDP(torch.nn.Linear(1, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    some_steps(model, optimizer, 3)
    if rank == 0:
        if case == "slow_checkpoint":
            write_checkpoint(SECONDS)
        else:
            write_checkpoint_to_a_dead_nfs_server(SECONDS)
    dist.barrier()  # the blocking line: slow_checkpoint rank 1; slow_checkpoint_blocked rank 1
    some_steps(model, optimizer, 3)
    print("done", flush=True)
    dist.destroy_process_group()


def a_port_nobody_listens_on():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def own_master_port():
    os.environ["MASTER_PORT"] = str(a_port_nobody_listens_on())
    dist.init_process_group("gloo")  # the blocking line: own_master_port every rank


def init_method_tcp():
    if rank == 1:
        time.sleep(600)  # the blocking line: init_method_tcp rank 1
    url = f"tcp://127.0.0.1:{a_port_nobody_listens_on()}"
    # like the seed scripts, it knows its world size (WORLD_SIZE = 2) and passes it with its rank
    dist.init_process_group("gloo", init_method=url, rank=rank, world_size=2)  # the blocking line: init_method_tcp rank 0


def legacy_local_rank():
    parser = argparse.ArgumentParser()
    parser.add_argument("--local_rank", type=int, default=0)
    args, _ = parser.parse_known_args(sys.argv[2:])
    dist.init_process_group("gloo", rank=args.local_rank)  # the blocking line: legacy_local_rank every rank


if case in ("ddp1", "ddp2", "ddp3", "ddp4", "ddp5", "ddp6"):
    uneven_inputs()
elif case in ("epoch_allreduce", "epoch_barrier"):
    uneven_epochs()
elif case == "busy_silent":
    busy(16)
elif case == "busy_silent_big":
    busy(16 << 20)
elif case in ("slow_checkpoint", "slow_checkpoint_blocked"):
    slow_checkpoint()
elif case in ("never_init", "straggler_exits", "straggler_exits_before_init", "own_master_port", "init_method_tcp",
              "legacy_local_rank"):
    globals()[case]()
else:
    sys.exit(f"seed_hangs.py: no case {case!r}")
