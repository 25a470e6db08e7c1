"""Step 1 for a small batch: its one Parquet file written from the driver.

A batch of at most ``wal.driver_stage_rows`` rows is collected onto the driver as
Arrow in one Spark job (``limit(n + 1)``: a larger batch shows itself by its extra
row and is staged by the executors instead, so at most n + 1 rows are ever held on
the driver), given ``_wal_seq`` 0..n-1 (in ``cdc.order_by`` order with CDC), and
written by pyarrow as one Parquet file into the attempt's own directory. The file
is then committed exactly as the executors' files are: the same add-action facts
(exact size, row count, ``_wal_seq`` range) and the same delta-rs commit carrying
the app transaction. What it saves is Spark's write job with its Hadoop commit
protocol, and the listing and footer reads after it.

Values are written as Spark's own Parquet writer writes them with staging's
settings: timestamps as INT64 microseconds, dates and times in the proleptic
Gregorian calendar; readers (the committer, delta-rs, delta-spark) see the same
types whichever path staged a batch.
"""

from __future__ import annotations

import uuid

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from pyspark.sql import DataFrame

from wal_sink.wal.format import parquet_write_options
from wal_sink.wal.reader import SEQ_COLUMN
from wal_sink.wal.storage_errors import storage_error
from wal_sink.wal.writer import WalWriter, WrittenFile


def collect_small(df: DataFrame, limit: int, order_by: str | None) -> pa.Table | None:
    """The batch as one Arrow table with ``_wal_seq`` first, when it has at most
    ``limit`` rows; None for a larger batch."""
    if order_by is not None:
        df = df.orderBy(order_by)  # ascending, nulls first: as range partitioning
    table = df.limit(limit + 1).toArrow()
    if table.num_rows > limit:
        return None
    seq = pa.array(range(table.num_rows), pa.int64())
    return table.add_column(0, SEQ_COLUMN, seq)


def write_file(
    writer: WalWriter, attempt: str, table: pa.Table, batch_id: int
) -> WrittenFile:
    """Write ``table`` as the attempt's one Parquet file; its add-action facts."""
    fs, root = writer.storage.filesystem(writer.location)
    name = f"part-00000-{uuid.uuid4().hex}.snappy.parquet"
    path = f"{root}/{attempt}/{name}"
    try:
        if isinstance(fs, pafs.LocalFileSystem):
            fs.create_dir(f"{root}/{attempt}", recursive=True)
        pq.write_table(
            table,
            path,
            filesystem=fs,
            coerce_timestamps="us",
            **parquet_write_options(table.schema),
        )
        info = fs.get_file_info(path)
    except Exception as e:
        raise storage_error(
            e, f"{writer.location}/{attempt}", sink_id=writer.sink_id, batch_id=batch_id
        ) from e
    rows = table.num_rows
    return WrittenFile(
        path=f"{attempt}/{name}",
        size=info.size,
        modified_ms=info.mtime_ns // 1_000_000,
        rows=rows,
        min_seq=0 if rows else None,
        max_seq=rows - 1 if rows else None,
    )
