"""The store requests of newer torch (list_keys, barrier, the queues), made with torch's own
TCPStore client against the server at HOST PORT, one JSON line per step on stdout. Run it once
against rankrun-store and once against torch's own server: the lines must be the same.

    store_ops_torch2.py HOST PORT [--prefix P] [--use-libuv auto|0|1] [--short SECONDS]

Each line is {"step": NAME, "result": VALUE} or {"step": NAME, "error": EXCEPTION_TYPE}; bytes
are {"bytes": TEXT}. Error messages (they name the server's address and the timeout) go to
stderr only, so stdout compares as is; a line that does not start with "{" is some library's
noise (UCX prints one in a chroot) and is not a step. Every key is under P (default "ops"): a
server may hold other keys, but none under P (run with another P to use a server again).

torch's client sends the queue requests only when it was made with use_libuv=True, and a torch
built without libuv (Debian's) refuses that: there every queue step reports NotImplementedError
whatever the server. --use-libuv auto (the default) takes libuv where this torch has it. The
first line names the torch version and the choice; it is the same for both servers of a run.

Exit status: 0 when every step ran (whatever its result), 1 when no client could be made (the
server cannot be reached, or --use-libuv 1 with a torch that has no libuv).

    build/rendezvous/rankrun-store --host 127.0.0.1 --port 0     # prints "listening on HOST:PORT"
    python3 tests/integration/scripts/store_ops_torch2.py 127.0.0.1 PORT > rankrun.jsonl
    # torch's own server, in another process (use_libuv=False where torch has no libuv):
    #   TCPStore("127.0.0.1", 0, None, True, timedelta(seconds=60), wait_for_workers=False)
    python3 tests/integration/scripts/store_ops_torch2.py 127.0.0.1 TORCH_PORT > torch.jsonl
    diff <(grep '^{' rankrun.jsonl) <(grep '^{' torch.jsonl)
"""

import argparse
import datetime
import json
import subprocess
import sys
import threading
import time

import torch
import torch.distributed as dist


def emit(step, **fields):
    print(json.dumps({"step": step, **fields}, sort_keys=True), flush=True)


def plain(value):
    if isinstance(value, (bytes, bytearray)):
        return {"bytes": bytes(value).decode("utf-8", "backslashreplace")}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def step(name, fn):
    """Runs fn, prints its result or the type of its exception; returns the result (or None)."""
    try:
        value = fn()
    except Exception as e:  # noqa: BLE001 - the kind of failure is what is compared
        print(f"{name}: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        emit(name, error=type(e).__name__)
        return None
    emit(name, result=plain(value))
    return value


class Client:
    def __init__(self, host, port, use_libuv, timeout):
        self.args = (host, port, use_libuv)
        self.store = dist.TCPStore(host, port, None, False, timeout, use_libuv=use_libuv)

    def fresh(self, timeout):
        host, port, use_libuv = self.args
        return dist.TCPStore(host, port, None, False, timeout, use_libuv=use_libuv)


def pick_libuv(choice, host, port, timeout):
    if choice in ("0", "1"):
        return choice == "1"
    try:
        dist.TCPStore(host, port, None, False, timeout, use_libuv=True)
        return True
    except Exception as e:  # noqa: BLE001
        if "libuv" in str(e):
            return False
        raise


def in_threads(n, fn):
    """Runs fn(i) in n threads at once; the list of their results (or exception types)."""
    results = [None] * n

    def run(i):
        try:
            results[i] = ("ok", plain(fn(i)))
        except Exception as e:  # noqa: BLE001
            print(f"thread {i}: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
            results[i] = ("error", type(e).__name__)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("host")
    parser.add_argument("port", type=int)
    parser.add_argument("--prefix", default="ops")
    parser.add_argument("--use-libuv", choices=("auto", "0", "1"), default="auto")
    parser.add_argument("--short", type=float, default=0.3, help="the timeout of the steps that time out")
    args = parser.parse_args()

    normal = datetime.timedelta(seconds=10)
    short = datetime.timedelta(seconds=args.short)
    p = args.prefix.rstrip("/") + "/"
    try:
        use_libuv = pick_libuv(args.use_libuv, args.host, args.port, normal)
        c = Client(args.host, args.port, use_libuv, normal)
    except Exception as e:  # noqa: BLE001
        print(f"no client for the store at {args.host}:{args.port}: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    s = c.store
    emit("client", result={"torch": torch.__version__.split("+")[0], "use_libuv": use_libuv})

    def mine():
        # Keys of this run, as torch's list_keys returns them (without the "/" it adds).
        return sorted(k for k in s.list_keys() if k.startswith(p))

    # --- list_keys ---
    step("list_keys.empty", mine)
    base_keys = s.num_keys()  # the server may hold other keys: only the change is printed
    s.set(p + "b", "1")
    s.set(p + "a", "")
    s.add(p + "counter", 5)
    step("list_keys.three", mine)
    step("num_keys.added", lambda: s.num_keys() - base_keys)
    s.delete_key(p + "b")
    step("list_keys.after_delete", mine)
    step("prefix_store.list_keys", lambda: sorted(dist.PrefixStore(p + "pre", s).list_keys()))

    # --- barrier ---
    step("barrier.world_size_1", lambda: s.barrier(p + "b1", 1))
    step("barrier.world_size_1.counter", lambda: s.get(p + "b1"))
    step("barrier.4_clients", lambda: in_threads(4, lambda i: c.fresh(normal).barrier(p + "b4", 4, normal)))
    step("barrier.4_clients.counter", lambda: s.get(p + "b4"))
    step("barrier.reused_key", lambda: s.barrier(p + "b4", 4, short))
    step("barrier.reused_key.counter", lambda: s.get(p + "b4"))
    step("barrier.timeout", lambda: s.barrier(p + "bt", 2, short))
    step("barrier.timeout.counter", lambda: s.get(p + "bt"))
    step("barrier.timeout.connection_usable", lambda: s.add(p + "counter", 1))
    step("barrier.after_timeout_reuse", lambda: s.barrier(p + "bt", 2, short))
    step("barrier.after_timeout_reuse.counter", lambda: s.get(p + "bt"))
    s.set(p + "text", "abc")
    step("barrier.not_a_number", lambda: c.fresh(normal).barrier(p + "text", 2, short))
    step("barrier.not_a_number.value", lambda: s.get(p + "text"))

    # An arrival whose process dies while it waits stays counted.
    child = subprocess.Popen(
        [sys.executable, "-c",
         "import datetime, sys, torch.distributed as d\n"
         "s = d.TCPStore(sys.argv[1], int(sys.argv[2]), None, False, datetime.timedelta(seconds=60),"
         " use_libuv=sys.argv[3] == '1')\n"
         "s.barrier(sys.argv[4], 3)\n",
         args.host, str(args.port), "1" if use_libuv else "0", p + "bk"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while not s.check([p + "bk"]) and time.monotonic() < deadline and child.poll() is None:
        time.sleep(0.02)
    child.kill()
    child.wait()
    time.sleep(0.2)  # the server sees the close
    step("barrier.killed_arrival.counter", lambda: s.get(p + "bk"))
    step("barrier.killed_arrival.two_more",
         lambda: in_threads(2, lambda i: c.fresh(normal).barrier(p + "bk", 3, normal)))
    step("barrier.killed_arrival.final_counter", lambda: s.get(p + "bk"))
    step("prefix_store.barrier", lambda: in_threads(
        2, lambda i: dist.PrefixStore(p + "pre", c.fresh(normal)).barrier("pb", 2, normal)))
    step("list_keys.after_barriers", mine)

    # --- queues ---
    q = p + "q"
    step("queue_len.missing", lambda: s.queue_len(q))
    step("queue_pop.empty_nonblocking", lambda: s.queue_pop(q, False))
    step("check.empty_queue", lambda: s.check([q]))
    step("queue_push.a", lambda: s.queue_push(q, "a"))
    step("queue_push.b", lambda: s.queue_push(q, "b"))
    step("queue_len.two", lambda: s.queue_len(q))
    step("check.queue", lambda: s.check([q]))
    step("queue_pop.nonblocking", lambda: s.queue_pop(q, False))
    step("queue_pop.blocking_ready", lambda: s.queue_pop(q, True))
    step("queue_len.drained", lambda: s.queue_len(q))
    step("check.drained_queue", lambda: s.check([q]))

    def blocking_pop_times_out():
        t = c.fresh(short)
        return t.queue_pop(q, True)

    step("queue_pop.blocking_timeout", blocking_pop_times_out)

    def blocking_pop_gets_push():
        popper = c.fresh(normal)
        out = {}

        def pop():
            try:
                out["value"] = popper.queue_pop(q, True)
            except Exception as e:  # noqa: BLE001
                out["error"] = type(e).__name__

        t = threading.Thread(target=pop)
        t.start()
        time.sleep(0.3)
        s.queue_push(q, "late")
        t.join(15)
        if "error" in out:
            raise RuntimeError(out["error"])
        return out.get("value")

    step("queue_pop.blocking_woken_by_push", blocking_pop_gets_push)
    step("queue.not_a_key.list_keys", mine)
    step("queue.not_a_key.num_keys", lambda: s.num_keys() - base_keys)
    return 0


if __name__ == "__main__":
    sys.exit(main())
