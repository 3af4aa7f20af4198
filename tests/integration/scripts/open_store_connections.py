"""Opens COUNT plain TCP connections, one after another, to the store at MASTER_ADDR:MASTER_PORT
(or HOST PORT from argv) and prints for each whether the store kept it or closed it at once:
"connection N: kept" / "connection N: closed". No torch needed."""
import os
import socket
import sys
import time

if len(sys.argv) > 3:
    host, port, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
else:
    host, port, count = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), int(sys.argv[1])
held = []
for n in range(1, count + 1):
    s = socket.create_connection((host, port), timeout=10)
    s.settimeout(0.5)
    try:
        closed = s.recv(1) == b""  # the store says nothing first: b"" is its close
    except socket.timeout:
        closed = False
    except ConnectionResetError:
        closed = True
    print(f"connection {n}: {'closed' if closed else 'kept'}", flush=True)
    held.append(s)
time.sleep(0.2)
