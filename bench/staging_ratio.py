"""Staging ratio: staging a batch into the WAL (Spark writes plain Parquet into the
attempt's directory with the extra ``_wal_seq`` column; the driver lists it, reads
the footers and commits exactly those files with delta-rs, carrying the app
transaction) vs. Spark writing the same batch as plain Parquet into a new
directory. Goal >= 0.9 at every size (higher is better).

Usage: python -m bench.staging_ratio [ROWS ...]   (default: 100 10000 1000000)
One run covers every size. Within a round each size is staged, then written as
plain Parquet, size after size; rounds repeat (``--repeat``, default 7) and the
ratio of medians is printed per size. Every stage goes into the same WAL per size
(batch ids 0, 1, …), as a running sink's WAL grows; every plain write into a new
directory, as staging writes a new attempt directory. Each input is cached first.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
from pathlib import Path

from bench.common import ratio_line, seconds, spark_session, upsert_rows
from wal_sink.spark.staging import stage
from wal_sink.wal.writer import WalWriter

SIZES = (100, 10_000, 1_000_000)


def frame(spark, rows: int):
    df = upsert_rows(spark, rows).cache()
    df.count()
    return df


def main(sizes: tuple[int, ...] = SIZES, repeat: int = 7) -> None:
    spark = spark_session()
    work = Path(tempfile.mkdtemp(prefix="wal-sink-bench-stage-"))
    frames = {rows: frame(spark, rows) for rows in sizes}
    writers = {rows: WalWriter(str(work / f"wal_{rows}"), "bench") for rows in sizes}
    # warm-up of both (JIT, class loading, the first delta-rs table), not counted
    for rows, df in frames.items():
        stage(df, WalWriter(str(work / f"warm_{rows}"), "warm"), 0)
        df.write.parquet(str(work / f"warm_parquet_{rows}"))
    ours: dict[int, list[float]] = {rows: [] for rows in sizes}
    baseline: dict[int, list[float]] = {rows: [] for rows in sizes}
    for run in range(repeat):
        for rows, df in frames.items():
            ours[rows].append(seconds(lambda: stage(df, writers[rows], run)))
            target = str(work / f"parquet_{rows}_{run}")
            baseline[rows].append(seconds(lambda: df.write.parquet(target)))
    for rows in sizes:
        print(
            f"{rows:,} rows: WAL stage {_ms(ours[rows])}; "
            f"plain Parquet {_ms(baseline[rows])}"
        )
        print(
            ratio_line(
                f"staging ratio at {rows:,} rows",
                [rows / s for s in ours[rows]],
                [rows / s for s in baseline[rows]],
                ">= 0.9",
            )
            + f"; medians {statistics.median(ours[rows]) * 1000:.0f} ms vs "
            f"{statistics.median(baseline[rows]) * 1000:.0f} ms"
        )
    spark.stop()
    shutil.rmtree(work, ignore_errors=True)


def _ms(times: list[float]) -> str:
    return "[" + ", ".join(f"{t * 1000:.0f}" for t in times) + "] ms"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("rows", nargs="*", type=int, default=list(SIZES))
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    main(tuple(args.rows), args.repeat)
