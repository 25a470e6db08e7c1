"""Follower poll cost: what one poll of the WAL's Delta log costs ``wal-sink follow``
(log_tail.py: a read of the next version's commit file), on a local disk and on an
S3-compatible server (the tests' s3proxy on loopback), with nothing new and with one
new stage commit; beside it, delta-rs's own refresh of the table
(``update_incremental``) and the refresh plus the listing of staged batches that
``recover`` does, for comparison. No Spark, no MySQL.

Usage: python -m bench.follow_poll [VERSIONS] [--polls N]
A WAL of VERSIONS stage commits (default 200, one small file each) is made first.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import pyarrow as pa

from devtools.s3proxy import S3Proxy
from wal_sink.storage import Storage
from wal_sink.wal.format import delta_table
from wal_sink.wal.log_tail import LogTail
from wal_sink.wal.reader import WalReader
from wal_sink.wal.task_files import file_schema, wal_schema, write_task_file
from wal_sink.wal.writer import WalWriter

SCHEMA = wal_schema(pa.schema([("k", pa.int64()), ("amount", pa.int64())]))
SINK = "poll"


def stage(location: str, storage: Storage, writer: WalWriter, batch_id: int) -> None:
    rows = pa.record_batch([pa.array(range(100)), pa.array([batch_id] * 100)], SCHEMA)
    task = write_task_file(location, storage, batch_id, "a", 0, [rows], SCHEMA)
    writer.commit(batch_id, [task.file], file_schema(SCHEMA))


def ms(fn, times: int) -> float:
    samples = []
    for _ in range(times):
        started = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


def measure(name: str, location: str, storage: Storage, versions: int, polls: int):
    writer = WalWriter(location, SINK, storage)
    started = time.perf_counter()
    for b in range(versions):
        stage(location, storage, writer, b)
    made = time.perf_counter() - started
    tail = LogTail(location, storage, SINK, versions - 1)
    idle = ms(tail.poll, polls)
    new = []
    for b in range(versions, versions + 20):
        stage(location, storage, writer, b)
        started = time.perf_counter()
        found = tail.poll()
        new.append((time.perf_counter() - started) * 1000)
        assert [v.staged.batch_id for v in found] == [b]
    table = delta_table(location, storage)
    refresh = ms(table.update_incremental, max(10, polls // 10))
    reader = WalReader(location, SINK, storage)

    def listing() -> None:
        reader.refresh()
        reader.staged_batches()

    listed = ms(listing, max(10, polls // 10))
    print(
        f"{name}: {versions} stage commits made in {made:.1f}s; one poll, nothing "
        f"new: {idle:.3f} ms; one poll finding a new stage commit: "
        f"{statistics.median(new):.3f} ms; delta-rs update_incremental, nothing new: "
        f"{refresh:.2f} ms; refresh + staged_batches: {listed:.2f} ms (medians)"
    )


def main(versions: int, polls: int) -> None:
    with tempfile.TemporaryDirectory(prefix="wal-sink-bench-poll-") as work:
        work_dir = Path(work)
        measure("local disk", str(work_dir / "wal"), Storage(), versions, polls)
        server = S3Proxy(work_dir / "s3")
        server.start()
        try:
            os.environ.update(server.credentials())
            bucket = server.create_bucket("poll")
            storage = Storage(
                endpoint=server.endpoint, region="us-east-1", path_style=True
            )
            measure("s3proxy (loopback)", f"{bucket}/wal", storage, versions, polls)
        finally:
            server.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("versions", nargs="?", type=int, default=200)
    parser.add_argument("--polls", type=int, default=500)
    args = parser.parse_args()
    main(args.versions, args.polls)
