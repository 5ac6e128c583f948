#!/usr/bin/python3
"""kafka-python as an independent oracle for the specs.

Usage: kp.py CMD INFILE OUTFILE [ARGS...]   (run with /usr/bin/python3)

  list                         -> lines "key version kind" of kafka-python's classes
  bodies                       -> INFILE: lines "encode KEY VER KIND JSON" (a positional body)
                                  or "reencode KEY VER KIND HEX" (body bytes to decode and
                                  encode again); OUT: a line per case, "ok HEX" or "error MSG"
  records_encode MAGIC CODEC   -> INFILE: messages (format below); OUT: records bytes
  records_decode               -> INFILE: records bytes; OUT: messages (format below)
  crc32c                       -> INFILE: lines of hex; OUT: a line per input, its CRC-32C in hex

Messages format (big-endian): per message int64 offset, int64 timestamp,
int32 key length (-1 null) + key, int32 value length (-1 null) + value,
int32 header count, then per header int32 key length + key, int32 value
length (-1 null) + value.
"""
import io
import json
import struct
import sys

from kafka.protocol import admin, commit, fetch, group, metadata, offset, produce
from kafka.protocol.struct import Struct
from kafka.protocol.types import Array, Schema
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def classes():
    out = {}
    for mod in (produce, fetch, offset, metadata, commit, group, admin):
        for name in dir(mod):
            obj = getattr(mod, name)
            if isinstance(obj, list) and obj and hasattr(obj[0], "API_KEY"):
                kind = "request" if name.endswith("Request") else "response"
                out[(obj[0].API_KEY, kind)] = obj
    return out


def to_py(v):
    """JSON positional form -> kafka-python values."""
    if isinstance(v, dict):
        if "s" in v:
            return tuple(to_py(x) for x in v["s"])
        if "b" in v:
            return bytes.fromhex(v["b"])
        if "t" in v:
            return bytes.fromhex(v["t"]).decode("utf-8")
    if isinstance(v, list):
        return [to_py(x) for x in v]
    return v


def adapt(value, ptype):
    """Fits our positional values to kafka-python's schema: where Kafka's
    definitions have a one-field struct (Metadata's topics) kafka-python has
    the bare value; the wire form is the same."""
    if isinstance(ptype, Schema):
        if not isinstance(value, tuple):
            return value
        if len(value) != len(ptype.fields):
            raise ValueError("our struct has %d fields, kafka-python's %d" % (len(value), len(ptype.fields)))
        return tuple(adapt(v, t) for v, t in zip(value, ptype.fields))
    if isinstance(ptype, Array):
        if value is None:
            return None
        return [adapt(v, ptype.array_of) for v in value]
    if isinstance(value, tuple) and len(value) == 1:
        return value[0]
    return value


def read_msgs(data):
    f = io.BytesIO(data)
    msgs = []

    def lenbytes():
        (n,) = struct.unpack(">i", f.read(4))
        return None if n < 0 else f.read(n)

    while True:
        head = f.read(16)
        if len(head) < 16:
            break
        off, ts = struct.unpack(">qq", head)
        key = lenbytes()
        value = lenbytes()
        (nh,) = struct.unpack(">i", f.read(4))
        headers = []
        for _ in range(nh):
            hk = lenbytes()
            hv = lenbytes()
            headers.append((hk.decode("utf-8"), hv))
        msgs.append((off, ts, key, value, headers))
    return msgs


def write_msgs(msgs):
    out = io.BytesIO()

    def lenbytes(b):
        if b is None:
            out.write(struct.pack(">i", -1))
        else:
            out.write(struct.pack(">i", len(b)))
            out.write(b)

    for off, ts, key, value, headers in msgs:
        out.write(struct.pack(">qq", off, ts if ts is not None else -1))
        lenbytes(key)
        lenbytes(value)
        out.write(struct.pack(">i", len(headers)))
        for hk, hv in headers:
            lenbytes(hk.encode("utf-8"))
            lenbytes(hv)
    return out.getvalue()


def main():
    cmd, inf, outf = sys.argv[1:4]
    args = sys.argv[4:]
    with open(inf, "rb") as f:
        data = f.read()
    out = b""
    if cmd == "list":
        lines = []
        for (key, kind), versions in sorted(classes().items()):
            for v, cls in enumerate(versions):
                if cls is not None:
                    lines.append("%d %d %s" % (key, v, kind))
        out = ("\n".join(lines) + "\n").encode()
    elif cmd == "bodies":
        # One case per line: "encode KEY VER KIND JSON" or "reencode KEY VER KIND HEX".
        # Answers one line per case: "ok HEX" or "error MESSAGE".
        table = classes()
        lines = []
        for line in data.decode().splitlines():
            op, key, ver, kind, arg = line.split(" ", 4)
            cls = table[(int(key), kind)][int(ver)]
            try:
                if op == "encode":
                    values = adapt(to_py(json.loads(arg)), cls.SCHEMA)
                    obj = cls(*values)  # keep a reference: encode is a WeakMethod
                    lines.append("ok " + obj.encode().hex())
                else:
                    buf = io.BytesIO(bytes.fromhex(arg))
                    obj = cls.decode(buf)
                    if buf.read(1):
                        raise ValueError("trailing bytes after kafka-python's decode")
                    lines.append("ok " + obj.encode().hex())
            except Exception as exc:  # reported per case to the spec
                lines.append("error %s: %r" % (cls.__name__, exc))
        out = ("\n".join(lines) + "\n").encode()
    elif cmd == "records_encode":
        magic, codec = int(args[0]), CODECS[args[1]]
        msgs = read_msgs(data)
        if magic == 2:
            b = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=0,
                                          producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                          batch_size=1 << 30)
            for i, (off, ts, key, value, headers) in enumerate(msgs):
                b.append(i, timestamp=ts, key=key, value=value, headers=headers)
        else:
            b = LegacyRecordBatchBuilder(magic=magic, compression_type=codec, batch_size=1 << 30)
            for i, (off, ts, key, value, headers) in enumerate(msgs):
                b.append(i, timestamp=ts if magic == 1 else None, key=key, value=value)
        out = bytes(b.build())
    elif cmd == "records_decode":
        recs = MemoryRecords(data)
        msgs = []
        while recs.has_next():
            batch = recs.next_batch()
            if hasattr(batch, "validate_crc") and not batch.validate_crc():
                raise SystemExit("kafka-python: CRC check failed")
            for r in batch:
                if hasattr(r, "validate_crc") and not r.validate_crc():
                    raise SystemExit("kafka-python: record CRC check failed")
                headers = list(r.headers) if hasattr(r, "headers") else []
                ts = r.timestamp if r.timestamp is not None else -1
                msgs.append((r.offset, ts, r.key, r.value, headers))
        out = write_msgs(msgs)
    elif cmd == "crc32c":
        from kafka.record import _crc32c
        out = "".join("%08x\n" % _crc32c.crc(bytes.fromhex(line))
                      for line in data.decode().split("\n") if line != "-").encode()
    else:
        raise SystemExit("unknown command " + cmd)
    with open(outf, "wb") as f:
        f.write(out)


if __name__ == "__main__":
    main()
