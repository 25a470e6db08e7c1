"""Staging ratio: staging a batch into the WAL (Delta, idempotent txn, partitioned)
vs. Spark writing the same batch as plain Parquet. Goal >= 0.8 (higher is better).

Usage: python -m bench.staging_ratio [ROWS]
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

from bench.common import ratio_line, seconds, spark_session
from wal_sink.spark.staging import stage
from wal_sink.wal.writer import WalWriter


def main(rows: int = 2_000_000, repeat: int = 5) -> None:
    spark = spark_session()
    work = Path(tempfile.mkdtemp(prefix="wal-sink-bench-stage-"))
    df = (
        spark.range(rows)
        .selectExpr(
            "concat('key-', id % 50000) AS k",
            "cast(id % 1000 AS decimal(12,2)) AS amount",
            "concat('label-', id) AS label",
            "id AS seq",
        )
        .cache()
    )
    df.count()
    stage(df, WalWriter(str(work / "warm"), "warm"), 0)
    ours, baseline = [], []
    for batch_id in range(repeat):
        ours.append(
            rows
            / seconds(
                lambda: stage(df, WalWriter(str(work / "wal"), "bench"), batch_id)
            )
        )
        baseline.append(
            rows
            / seconds(lambda: df.write.mode("overwrite").parquet(str(work / "parquet")))
        )
    print(
        f"rows: {rows}; WAL stage {[f'{r:,.0f}' for r in ours]} rows/s; "
        f"plain Parquet {[f'{r:,.0f}' for r in baseline]} rows/s"
    )
    print(ratio_line("staging ratio", ours, baseline, ">= 0.8"))
    spark.stop()
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:2]))
