"""Staging ratio: staging a batch into the WAL as the sink does vs. Spark writing
the same batch as plain Parquet into a new directory. Goal >= 0.9 at every size
(higher is better).

The sink stages a batch of at most ``wal.driver_stage_rows`` rows (default 10,000)
from the driver once the batch before it was that small too (one Arrow collect,
pyarrow writes one file: spark/driver_stage.py), a larger one from the executors
(Spark writes plain Parquet into the attempt's directory with the extra
``_wal_seq`` column; the driver lists it and reads the footers). Either way the
driver commits exactly those files with delta-rs, carrying the app transaction.
The ratio is of the default path at each size, a stream of batches of that size in
its steady state; at sizes the driver stages, the executors' path is measured in
the same rounds too and printed beside it.

Usage: python -m bench.staging_ratio [ROWS ...]   (default: 100 10000 1000000)
One run covers every size. Within a round each size is staged (each path), then
written as plain Parquet, size after size; rounds repeat (``--repeat``, default 7)
and the ratio of medians is printed per size. Every stage goes into the same WAL
per size and path (batch ids 0, 1, …), as a running sink's WAL grows; every plain
write into a new directory, as staging writes a new attempt directory. Each input
is cached first.
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import statistics
import tempfile
from pathlib import Path

from bench.common import ratio_line, seconds, spark_session, upsert_rows
from wal_sink.config.sections import WalConfig
from wal_sink.spark.staging import stage
from wal_sink.wal.writer import WalWriter

SIZES = (100, 10_000, 1_000_000)
DRIVER_ROWS = {f.name: f.default for f in dataclasses.fields(WalConfig)}[
    "driver_stage_rows"
]


def frame(spark, rows: int):
    df = upsert_rows(spark, rows).cache()
    df.count()
    return df


def main(sizes: tuple[int, ...] = SIZES, repeat: int = 7) -> None:
    spark = spark_session()
    work = Path(tempfile.mkdtemp(prefix="wal-sink-bench-stage-"))
    frames = {rows: frame(spark, rows) for rows in sizes}
    # the sink's path at each size, and the executors' where that is another
    paths = {
        rows: {"sink": DRIVER_ROWS if rows <= DRIVER_ROWS else 0}
        | ({"executors": 0} if rows <= DRIVER_ROWS else {})
        for rows in sizes
    }
    writers = {
        (rows, path): WalWriter(str(work / f"wal_{rows}_{path}"), "bench")
        for rows in sizes
        for path in paths[rows]
    }
    # warm-up of each (JIT, class loading, the first delta-rs table), not counted
    for rows, df in frames.items():
        for path, driver_rows in paths[rows].items():
            warm = WalWriter(str(work / f"warm_{rows}_{path}"), "warm")
            stage(df, warm, 0, driver_rows=driver_rows)
        df.write.parquet(str(work / f"warm_parquet_{rows}"))
    ours = {key: [] for key in writers}
    baseline: dict[int, list[float]] = {rows: [] for rows in sizes}
    for run in range(repeat):
        for rows, df in frames.items():
            for path, driver_rows in paths[rows].items():
                writer = writers[rows, path]
                ours[rows, path].append(
                    seconds(lambda: stage(df, writer, run, driver_rows=driver_rows))
                )
            target = str(work / f"parquet_{rows}_{run}")
            baseline[rows].append(seconds(lambda: df.write.parquet(target)))
    for rows in sizes:
        sink = "from the driver" if paths[rows]["sink"] else "from the executors"
        print(
            f"{rows:,} rows: WAL stage {sink} {_ms(ours[rows, 'sink'])}"
            + (
                f"; from the executors {_ms(ours[rows, 'executors'])}"
                if "executors" in paths[rows]
                else ""
            )
            + f"; plain Parquet {_ms(baseline[rows])}"
        )
        for path in paths[rows]:
            label = "staging ratio" if path == "sink" else "from the executors"
            print(
                ratio_line(
                    f"{label} at {rows:,} rows",
                    [rows / s for s in ours[rows, path]],
                    [rows / s for s in baseline[rows]],
                    ">= 0.9",
                )
                + f"; medians {statistics.median(ours[rows, path]) * 1000:.0f} ms "
                f"vs {statistics.median(baseline[rows]) * 1000:.0f} ms"
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
