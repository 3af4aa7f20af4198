"""An outsider holding as many silent connections to a store as it can: opens COUNT, and every
0.1 s opens again those the store closed, until STOP_FILE exists. Prints "held N" once N
connections are open at once 2 s after the start (the store closes those past its limit), then,
at the end,
one JSON line: {"opened": total, "closed_by_store": how many the store closed}. With "first-speaks",
the first connection sends one byte (a request begun, as a node's handshake is on a loaded host) and
never more, and "first closed" is printed when the store closes it.

    conn_flood.py HOST PORT COUNT STOP_FILE [first-speaks]
"""
import json
import os
import selectors
import socket
import sys
import time


def main():
    host, port, count, stop_file = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    first_speaks = sys.argv[5:] == ["first-speaks"]
    first = None
    sel = selectors.DefaultSelector()
    open_socks = set()
    opened = closed = 0
    announced = False
    started = time.monotonic()
    while not os.path.exists(stop_file):
        while len(open_socks) < count:
            s = socket.socket()
            s.settimeout(2)
            try:
                s.connect((host, port))
            except OSError:
                s.close()
                break
            if first is None:
                first = s
                if first_speaks:
                    s.sendall(b"\x00")
            s.setblocking(False)
            sel.register(s, selectors.EVENT_READ)
            open_socks.add(s)
            opened += 1
        for key, _ in sel.select(timeout=0.1):
            s = key.fileobj
            try:
                data = s.recv(4096)
            except OSError:
                data = b""
            if not data:
                sel.unregister(s)
                s.close()
                open_socks.discard(s)
                closed += 1
                if s is first and first_speaks:
                    print("first closed", flush=True)
        if not announced and time.monotonic() - started > 2:
            print(f"held {len(open_socks)}", flush=True)
            announced = True
    for s in open_socks:
        s.close()
    print(json.dumps({"opened": opened, "closed_by_store": closed}), flush=True)


if __name__ == "__main__":
    main()
