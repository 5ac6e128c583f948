#!/usr/bin/env python3
"""A scripted TLS peer for spec/tls_spec.lua (Python's ssl module, an
implementation other than ours): it serves connections on 127.0.0.1 until
none comes for `idle` seconds, each by `mode`, writing the raw TLS bytes
itself (memory BIOs) so that records can be split across reads or cut.

    tlspeer.py MODE CERTDIR PORTFILE IDLE

Modes (after the handshake, each sends one response frame: size, the
correlation id 7, then PAYLOAD bytes of the pattern below):
  frame         the frame's records in one write
  split         the frame's records in pieces: the first 300 bytes one by
                one (record headers split), then 4093-byte pieces, 2 ms apart
  cut           the first record, half of the second, then the TCP close
  close_notify  the frame, then close_notify and the TCP close
  handshake     the handshake only, then waits for the client to close
  sni           the frame's payload is the server name the client sent (SNI), "-" for none
  notls         no TLS: answers the ClientHello with an HTTP 400
  silent        accepts and never answers
"""
import os
import socket
import ssl
import struct
import sys
import time

PAYLOAD = 100000


def payload(n):
    return bytes((i * 7 + 3) % 251 for i in range(n))


def main():
    mode, certdir, portfile, idle = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(os.path.join(certdir, "cert.pem"), os.path.join(certdir, "key.pem"))
    sni = {}

    def on_sni(_obj, name, _ctx):
        sni["name"] = name
    ctx.sni_callback = on_sni
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(4)
    with open(portfile + ".tmp", "w") as f:
        f.write(str(ls.getsockname()[1]) + "\n" + str(os.getpid()) + "\n")
    os.rename(portfile + ".tmp", portfile)
    ls.settimeout(idle)
    while True:
        try:
            conn, _ = ls.accept()
        except socket.timeout:
            return
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn.settimeout(10)
        try:
            sni.clear()
            serve(mode, ctx, conn, sni)
        except (OSError, ssl.SSLError):
            pass
        finally:
            conn.close()


def serve(mode, ctx, conn, sni):
    if mode == "silent":
        conn.recv(4096)
        time.sleep(8)
        return
    if mode == "notls":
        conn.recv(4096)
        conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
        time.sleep(0.5)
        return
    inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(inc, out, server_side=True)
    while True:
        try:
            obj.do_handshake()
            break
        except ssl.SSLWantReadError:
            if out.pending:
                conn.sendall(out.read())
            data = conn.recv(65536)
            if not data:
                return
            inc.write(data)
        except ssl.SSLError:
            if out.pending:  # our alert
                conn.sendall(out.read())
            raise
    if out.pending:
        conn.sendall(out.read())
    if mode == "handshake":
        while conn.recv(65536):
            pass
        return
    body = (sni.get("name") or "-").encode() if mode == "sni" else payload(PAYLOAD)
    obj.write(struct.pack(">ii", 4 + len(body), 7) + body)
    raw = out.read()
    if mode in ("frame", "close_notify", "sni"):
        conn.sendall(raw)
    elif mode == "split":
        for i in range(300):
            conn.sendall(raw[i:i + 1])
            time.sleep(0.002)
        for i in range(300, len(raw), 4093):
            conn.sendall(raw[i:i + 4093])
            time.sleep(0.002)
    elif mode == "cut":
        first = 5 + struct.unpack(">H", raw[3:5])[0]
        second = 5 + struct.unpack(">H", raw[first + 3:first + 5])[0]
        conn.sendall(raw[:first + second // 2])
        time.sleep(0.2)
        return
    if mode == "close_notify":
        try:
            obj.unwrap()
        except ssl.SSLWantReadError:
            pass
        conn.sendall(out.read())
        time.sleep(0.2)
        return
    # wait for the client to close
    while conn.recv(65536):
        pass


if __name__ == "__main__":
    main()
