"""Staging ratio on S3: staging a batch into a WAL on an S3-compatible server
(Spark writes Parquet through S3A, the driver lists the attempt, reads footers and
commits with delta-rs) vs. Spark writing the same batch as plain Parquet to the
same server. Goal >= 0.9 (higher is better).

The server is a private s3proxy on loopback (filesystem backend): no network in
between, so the ratio shows what the sink adds per batch, not a real store's
latency. Each run writes a new directory, as staging does; Hadoop's default
committer in both.

Usage: python -m bench.staging_ratio_s3 [ROWS]
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

from bench.common import ratio_line, seconds, spark_session
from bench.staging_ratio import frame
from devtools.s3proxy import REGION, S3Proxy
from wal_sink.storage import Storage
from wal_sink.wal.writer import WalWriter


def main(rows: int = 1_000_000, repeat: int = 7) -> None:
    work = Path(tempfile.mkdtemp(prefix="wal-sink-bench-s3-"))
    server = S3Proxy(work / "s3proxy")
    server.start()
    os.environ.update(server.credentials())  # before the JVM starts: S3A reads them
    bucket = server.create_bucket("bench")
    storage = Storage(endpoint=server.endpoint, region=REGION, path_style=True)
    from wal_sink.spark.staging import stage

    spark = spark_session()
    try:
        storage.configure_spark(spark)
        df = frame(spark, rows)
        stage(df, WalWriter(f"{bucket}/warm", "warm", storage), 0)
        df.write.parquet(f"{bucket}/parquet/warm")
        ours, baseline = [], []
        writer = WalWriter(f"{bucket}/wal", "bench", storage)
        for batch_id in range(repeat):
            ours.append(rows / seconds(lambda: stage(df, writer, batch_id)))
            baseline.append(
                rows
                / seconds(lambda: df.write.parquet(f"{bucket}/parquet/run-{batch_id}"))
            )
        print(
            f"rows: {rows}; WAL stage on S3 {[f'{r:,.0f}' for r in ours]} rows/s; "
            f"plain Parquet on S3 {[f'{r:,.0f}' for r in baseline]} rows/s"
        )
        print(ratio_line("staging ratio on S3", ours, baseline, ">= 0.9"))
    finally:
        spark.stop()
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:2]))
