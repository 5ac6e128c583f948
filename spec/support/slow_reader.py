#!/usr/bin/python3
"""A peer that reads slowly (bytes_spec.lua: a frame in pieces written in
many sendmsg() calls). Usage: slow_reader.py PORT OUTFILE NBYTES
Listens on 127.0.0.1:PORT, prints "ready", accepts one connection, reads
NBYTES in reads of 16 KiB with a pause after each (a small receive buffer)
and writes them to OUTFILE. Every wait has a 10 s deadline."""
import socket
import sys
import time

port, outfile, want = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
lsock = socket.socket()
lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
lsock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
lsock.bind(("127.0.0.1", port))
lsock.listen(1)
lsock.settimeout(10)
print("ready", flush=True)
conn, _ = lsock.accept()
conn.settimeout(10)
got, n = [], 0
while n < want:
    d = conn.recv(16384)
    if not d:
        break
    got.append(d)
    n += len(d)
    time.sleep(0.0005)
with open(outfile, "wb") as f:
    f.write(b"".join(got))
