"""A pod's training script for test_launch_contexts.py: what the launcher handed it, as one JSON
line ('pod-env {...}'), then the contract proven end to end: init_process_group("gloo") from the
environment (env://, so through the store at MASTER_ADDR:MASTER_PORT), all_reduce of a 1 (the sum
is the world size), 'pod-sum {...}', a barrier, 'pod-done {...}'.

    pod_worker.py [--until-world N]

With --until-world N a worker whose WORLD_SIZE is below N prints 'pod-wait {...}' after its
all_reduce and stays until its launcher stops it (a new round of an elastic job); at N or above
it finishes at once. It gives up after 120 s so that nothing outlives a broken test for long.
This file uses no dollar sign, backquote or backslash: test_launch_contexts.py also writes it
through an unquoted shell here-document, as Kubeflow's v1 SDK writes a training function."""
import json
import os
import socket
import sys
import time

KEYS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_NAME",
        "ROLE_RANK", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID",
        "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS")


def resolve(name):
    """The IPv4 addresses 'name' resolves to here (this pod's /etc/hosts), or the error."""
    if not name:
        return None
    try:
        return sorted({a[4][0] for a in socket.getaddrinfo(name, None, socket.AF_INET)})
    except OSError as e:
        return "error: " + str(e)


def emit(kind, **fields):
    print(kind + " " + json.dumps(fields, sort_keys=True), flush=True)


def main():
    until = None
    if len(sys.argv) >= 3 and sys.argv[1] == "--until-world":
        until = int(sys.argv[2])
    env = {k: os.environ.get(k) for k in KEYS}
    emit("pod-env", hostname=socket.gethostname(), master_addr_resolves_to=resolve(env["MASTER_ADDR"]), **env)

    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    t = torch.ones(1)
    dist.all_reduce(t)
    ids = dict(RANK=env["RANK"], WORLD_SIZE=env["WORLD_SIZE"], torch_rank=dist.get_rank(),
               torch_world=dist.get_world_size())
    emit("pod-sum", sum=int(t.item()), **ids)
    if until is not None and int(env["WORLD_SIZE"]) < until:
        emit("pod-wait", **ids)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            time.sleep(0.2)
        sys.exit(3)
    dist.barrier()
    dist.destroy_process_group()
    emit("pod-done", **ids)


if __name__ == "__main__":
    main()
    sys.exit(0)
