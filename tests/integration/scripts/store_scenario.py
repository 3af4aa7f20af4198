"""One fixed sequence of TCPStore client calls against the server at HOST PORT, with whatever
torch runs this script (1.13, 2.6, 2.14): one JSON list on stdout, each entry the call's value
or ["error", EXCEPTION_TYPE]. Run it against rankrun's store and against torch's own server:
the lists must be the same.

    store_scenario.py HOST PORT
"""
import datetime
import json
import sys

import torch.distributed as dist

SHORT = datetime.timedelta(milliseconds=300)
NORMAL = datetime.timedelta(seconds=10)
# A torch built without libuv (Debian's 2.x) refuses 2.4+'s default use_libuv=True; 1.13 has no
# such argument.
NO_LIBUV = {"use_libuv": False} if "use_libuv" in (dist.TCPStore.__init__.__doc__ or "") else {}


def client(port, timeout=NORMAL):
    return dist.TCPStore(sys.argv[1], port, None, False, timeout, **NO_LIBUV)


def short_timeout(store):
    # Set after connecting, so that only the operation (not the connect) has the short deadline.
    store.set_timeout(SHORT)
    return store


def outcome(fn):
    """The value, or the exception's type: both servers must agree on either."""
    try:
        return ("ok", fn())
    except Exception as e:  # noqa: BLE001 - the kind of failure is what is compared
        return ("error", type(e).__name__)


def plain(value):
    if isinstance(value, (bytes, bytearray)):
        return {"bytes": bytes(value).decode("latin-1")}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def scenario(port):
    results = []
    record = results.append
    s = client(port)
    s.set("k", "v")
    record(s.get("k"))
    s.set("bin", b"\x00\xff\x00")
    record(s.get("bin"))
    record(s.add("cnt", 3))
    record(s.add("cnt", -1))
    record(s.get("cnt"))
    record(s.add("fresh", 0))
    record(s.compare_set("k", "v", "w"))
    record(s.compare_set("k", "zzz", "q"))
    record(s.get("k"))
    record(s.compare_set("missing", "x", "y"))
    record(outcome(lambda: short_timeout(client(port)).get("missing")))
    record(s.compare_set("new", "", "y"))
    record(s.get("new"))
    s.wait(["k", "cnt"])
    s.wait(["k"], NORMAL)
    record(s.num_keys())
    record(s.delete_key("k"))
    record(s.delete_key("k"))
    record(s.num_keys())
    # A wait on a key nobody sets times out (1.13 clients then desynchronise: fresh client).
    record(outcome(lambda: client(port).wait(["never"], SHORT)))
    # ADD on a non-numeric value: the server drops that connection.
    s.set("text", "abc")
    record(outcome(lambda: client(port).add("text", 1)))
    record(s.get("text"))
    record(s.num_keys())
    return results


if __name__ == "__main__":
    print(json.dumps(plain(scenario(int(sys.argv[2])))), flush=True)
