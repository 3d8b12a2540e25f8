#!/usr/bin/env python3
"""What the page size does to a durable write's flush (BENCHMARKS.md, eighth session).

The commit of a local write, in SQLite alone through Python's sqlite3: a record inserted into a table of
100,000 with a unique index and a partial pending index, and an outbox row, in WAL with synchronous=FULL,
each sample beside a bare fsync (one 4 KiB page rewritten in a preallocated file, then fsync). Run once with
SYNC=FULL (the default) and once with SYNC=OFF: the second gives the CPU part, the difference the flush part.

    python3 scripts/page-size-write.py            # in a folder on the disk to measure
    SYNC=OFF python3 scripts/page-size-write.py
"""
import os
import random
import sqlite3
import statistics
import sys
import tempfile
import time

SYNC = os.environ.get("SYNC", "FULL")


def measure(folder, page_size, samples=1500):
    path = os.path.join(folder, "store-%d.sqlite" % page_size)
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA page_size=%d" % page_size)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=%s" % SYNC)
    db.execute("PRAGMA wal_autocheckpoint=4000")
    db.execute("CREATE TABLE records (id INTEGER PRIMARY KEY, collection TEXT, record_id TEXT, payload BLOB,"
               " status INT, updated_at INT, UNIQUE (collection, record_id))")
    db.execute("CREATE INDEX pending ON records (status) WHERE status = 0")
    db.execute("CREATE TABLE outbox (seq INTEGER PRIMARY KEY, collection TEXT, record_id TEXT, payload BLOB,"
               " client_ts INT)")
    db.execute("BEGIN")
    for i in range(100_000):
        db.execute("INSERT INTO records (collection, record_id, payload, status, updated_at) VALUES (?, ?, ?, 1, ?)",
                   ("notes", "r%06d" % i, os.urandom(300), i))
    db.execute("COMMIT")
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    bare = os.open(os.path.join(folder, "bare"), os.O_RDWR | os.O_CREAT)
    os.ftruncate(bare, 1 << 20)
    page = os.urandom(4096)
    writes, flushes = [], []
    for k in range(samples):
        start = time.perf_counter()
        os.pwrite(bare, page, 4096 * random.randrange(256))
        os.fsync(bare)
        flushes.append(time.perf_counter() - start)
        record = "n%07d" % k
        start = time.perf_counter()
        db.execute("BEGIN IMMEDIATE")
        db.execute("INSERT INTO records (collection, record_id, payload, status, updated_at) VALUES (?, ?, ?, 0, ?)",
                   ("notes", record, os.urandom(300), 200_000 + k))
        db.execute("INSERT INTO outbox (collection, record_id, payload, client_ts) VALUES (?, ?, ?, ?)",
                   ("notes", record, os.urandom(300), 200_000 + k))
        db.execute("COMMIT")
        writes.append(time.perf_counter() - start)
    os.close(bare)
    db.close()
    write, flush = statistics.median(writes), statistics.median(flushes)
    print("page %5d: write p50 %4.0f µs, bare fsync p50 %4.0f µs, ratio %.2f× (synchronous=%s)"
          % (page_size, write * 1e6, flush * 1e6, write / flush, SYNC))
    sys.stdout.flush()


if __name__ == "__main__":
    with tempfile.TemporaryDirectory(dir=".") as folder:
        for size in (4096, 2048, 1024):
            measure(folder, size)
