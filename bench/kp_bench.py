#!/usr/bin/python3
"""bench/kp_bench.py: kafka-python doing what bench/codec.lua does (RecordBatch
v2 encode and decode of 10,000 messages); same output format. Run with
/usr/bin/python3 (Debian's python3-kafka, python3-crc32c for its C CRC)."""
import gc
import os
import time

from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

N = 10000
RUNS = int(os.environ.get("BENCH_RUNS", "7"))
TS = 1700000000000
CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def median(f):
    f()
    t = []
    for _ in range(RUNS):
        gc.collect()
        t0 = time.process_time()
        f()
        t.append(time.process_time() - t0)
    t.sort()
    return N / t[(RUNS + 1) // 2 - 1]


def encode(vals, codec):
    b = DefaultRecordBatchBuilder(magic=2, compression_type=CODECS[codec], is_transactional=0,
                                  producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                  batch_size=1 << 30)
    for i, v in enumerate(vals):
        b.append(i, timestamp=TS, key=None, value=v, headers=[])
    return bytes(b.build())


def decode(data):
    recs = MemoryRecords(data)
    n = 0
    while recs.has_next():
        for r in recs.next_batch():
            n += len(r.value)
    return n


for size in (100, 1024):
    vals = [(str(i) + "x" * (size - len(str(i)))).encode() for i in range(1, N + 1)]
    for codec in CODECS:
        print("encode_batch\t%d\t%s\t%.0f" % (size, codec, median(lambda: encode(vals, codec))), flush=True)
        data = encode(vals, codec)
        print("decode_tables\t%d\t%s\t%.0f" % (size, codec, median(lambda: decode(data))), flush=True)
