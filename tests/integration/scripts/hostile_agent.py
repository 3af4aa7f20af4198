"""An outsider on the job's network, speaking the store's wire protocol by hand (torch 2.2+'s
table, as rankrun's agents do): each attack opens a connection, sends its frames, and reports
what came back before the store closed it, as one JSON line:

    RUN_ID=job1 hostile_agent.py HOST PORT ATTACK...
    {"attack": "forge-stop", "reply": "<hex>", "closed": true}

Attacks:
    forge-stop      choose the agents' key space with a plain SET, then COMPARE_SET stop/0 to a
                    forged failure notice (rank 0 exited 42)
    claim-node      the same, then COMPARE_SET node/2 to a record of its own
    join            the same, then SET join/x (an elastic round's join), then GETNUMKEYS
    read-nodes      the same, then MULTI_GET of node/0..2 and GET lease/0
    no-proof        the key-space handshake without a secret (COMPARE_SET rankrun/key-space, "")
    wrong-proof     the handshake with a nonce, then a proof made with a guessed secret
    attempt-by-name choose the workers' key space by name ("attempt_0") with a plain SET, then
                    LIST_KEYS
    attempt-hello   the same name through the handshake without a secret, then LIST_KEYS
    worker          what an unmodified torch client does: no key space named, so the workers'
                    own; SET a key, then LIST_KEYS
"""
import hashlib
import hmac
import json
import os
import socket
import struct
import sys
import time

VALIDATE, SET, COMPARE_SET, GET, ADD, CHECK, WAIT, GETNUMKEYS = 0, 1, 2, 3, 4, 5, 6, 7
MULTI_GET, PING, LIST_KEYS = 10, 13, 17
AGENTS = b"rankrun-agents"


def s(b):
    return struct.pack("<Q", len(b)) + b


def validate():
    return bytes([VALIDATE]) + struct.pack("<I", 0x3C85F7CE)


def frame(op, *strings):
    return bytes([op]) + b"".join(s(x) for x in strings)


def multi(op, keys):
    return bytes([op]) + struct.pack("<Q", len(keys)) + b"".join(s(k) for k in keys)


def choose(name):
    return frame(SET, b"rankrun/key-space", name)


def hello(name, offer):
    return frame(COMPARE_SET, b"rankrun/key-space", name, offer)


def talk(host, port, first, then=None, wait=3.0):
    """Sends `first`; if `then` is given, calls it with what came back first and sends what it
    returns. Returns (everything received, whether the store closed the connection)."""
    c = socket.create_connection((host, port), timeout=5)
    c.settimeout(wait)
    got = b""
    closed = False
    try:
        c.sendall(first)
        if then is not None:
            got = c.recv(4096)
            if not got:
                return got, True
            c.sendall(then(got))
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                chunk = c.recv(65536)
            except socket.timeout:
                break
            except ConnectionResetError:
                closed = True
                break
            if not chunk:
                closed = True
                break
            got += chunk
    finally:
        c.close()
    return got, closed


def attack(name, host, port):
    # What a node writes (launcher/cluster/records.cpp), so that a store that took them would act.
    notice = json.dumps({"record": "stop", "version": 2, "kind": "failure", "node_rank": 0, "host": host,
                         "restartable": False, "rank": 0, "local_rank": 0, "signaled": False, "value": 42,
                         "error_file": "", "error_message": "forged by an outsider"}).encode()
    run_id = os.environ.get("RUN_ID", "none")
    record = json.dumps({"record": "node", "version": 2, "node_rank": 0, "host": "10.250.0.4-evil", "nproc": 2,
                         "run_id": run_id, "instance": "evil"}).encode().replace(b'"node_rank": 0', b'"node_rank": %d')
    if name == "forge-stop":
        return talk(host, port, validate() + choose(AGENTS) + frame(COMPARE_SET, b"stop/0", b"", notice))
    if name == "claim-node":
        return talk(host, port, validate() + choose(AGENTS) + frame(COMPARE_SET, b"node/2", b"", record % 2))
    if name == "join":
        return talk(host, port, validate() + choose(AGENTS) + frame(SET, b"join/x", record % -1) + bytes([GETNUMKEYS]))
    if name == "read-nodes":
        return talk(host, port, validate() + choose(AGENTS) + multi(MULTI_GET, [b"node/0", b"node/1", b"node/2"])
                    + frame(GET, b"lease/0"))
    if name == "no-proof":
        return talk(host, port, validate() + hello(AGENTS, b"") + frame(GET, b"node/0"))
    if name == "wrong-proof":
        nonce = os.urandom(32)

        def prove(reply):
            # u64 length, "challenge:", the store's 32-byte nonce
            server_nonce = reply[8 + len(b"challenge:"):8 + len(b"challenge:") + 32]
            msg = b"rankrun key-space proof v1: client to store\0" + AGENTS + b"\0" + nonce + server_nonce
            proof = hmac.new(b"a guessed secret", msg, hashlib.sha256).digest()
            return frame(COMPARE_SET, b"rankrun/key-space-proof", AGENTS, proof) + frame(GET, b"node/0")

        first, closed = talk(host, port, validate() + hello(AGENTS, b"hmac-sha256:" + nonce), then=prove)
        return first, closed
    if name == "attempt-by-name":
        return talk(host, port, validate() + choose(b"attempt_0") + bytes([LIST_KEYS]))
    if name == "attempt-hello":
        return talk(host, port, validate() + hello(b"attempt_0", b"") + bytes([LIST_KEYS]))
    if name == "worker":
        return talk(host, port, validate() + frame(SET, b"/outsider", b"x") + bytes([LIST_KEYS]))
    raise SystemExit(f"unknown attack {name}")


def main():
    host, port = sys.argv[1], int(sys.argv[2])
    for name in sys.argv[3:]:
        reply, closed = attack(name, host, port)
        print(json.dumps({"attack": name, "reply": reply.hex(), "closed": closed}), flush=True)


if __name__ == "__main__":
    main()
