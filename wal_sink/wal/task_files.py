"""One Spark task's share of a micro-batch, written straight into the WAL (the data
source's Step 1, on an executor).

A task writes its rows as one Parquet file under ``_wal_batch_id=N/<attempt>/``,
the batch's partition and a directory of this attempt's own, and describes it as
its Delta add action needs (``WrittenFile``): exact size and row count, and the
``_wal_seq`` range. The driver then commits exactly those files; it lists nothing
and reads no footer. A file no commit names (a failed task, a query that died
before its commit) is never read and ``purge --vacuum`` removes it.

``_wal_seq`` is ``(partition << 33) + row index``, as Spark's
``monotonically_increasing_id`` numbers rows: rising within the file in the order
the rows came, disjoint between partitions, so a batch's files ordered by their
first ``_wal_seq`` replay it in stage order (I4). With an order column (CDC) the
task sorts its rows on it first (nulls first, as Spark sorts ascending) and reports
the column's range, so the driver can check that the files follow each other.

Types as Spark's own Parquet writer leaves them in the WAL: timestamps INT64
microseconds (in UTC when they carry a time zone), plain (not "large") strings,
binaries and lists.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from wal_sink.config import RESERVED_PREFIX
from wal_sink.errors import TerminalError
from wal_sink.storage import Storage, join
from wal_sink.wal.format import BATCH_COLUMN, SEQ_COLUMN, parquet_write_options
from wal_sink.wal.storage_errors import storage_error
from wal_sink.wal.writer import WrittenFile

PARTITION_SHIFT = 33
"""Rows of one partition (task) number below 2**33, as in Spark."""
GROUP_ROWS = 128 * 1024
GROUP_BYTES = 64 * 1024 * 1024
"""A row group is written once this many rows, or bytes, wait: Arrow batches from
Spark hold at most 10,000 rows each, and a row group per batch would make the file
slow to read back."""


@dataclass(frozen=True)
class OrderRange:
    """The order column's (CDC) range in one file: lowest and highest value, and
    whether the file holds nulls, which sort first."""

    low: Any
    high: Any
    has_null: bool


@dataclass(frozen=True)
class TaskFile:
    """What one task wrote: the file as its add action needs it, and with an order
    column, that column's range."""

    file: WrittenFile
    order: OrderRange | None = None


def wal_schema(schema: pa.Schema) -> pa.Schema:
    """The stream's columns as the WAL stores them (see the module docstring).

    Raises:
        TerminalError: a column uses the reserved ``_wal_`` prefix.
    """
    reserved = [n for n in schema.names if n.startswith(RESERVED_PREFIX)]
    if reserved:
        raise TerminalError(
            f"stream column(s) {', '.join(reserved)} use the reserved prefix "
            f"{RESERVED_PREFIX!r}; rename them before the sink"
        )
    return pa.schema([f.with_type(_stored(f.type)) for f in schema])


def _stored(kind: pa.DataType) -> pa.DataType:
    if pa.types.is_timestamp(kind):
        return pa.timestamp("us", "UTC" if kind.tz else None)
    if pa.types.is_large_string(kind):
        return pa.string()
    if pa.types.is_large_binary(kind):
        return pa.binary()
    if pa.types.is_map(kind):
        item = kind.item_field.with_type(_stored(kind.item_type))
        return pa.map_(_stored(kind.key_type), item)
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return pa.list_(kind.value_field.with_type(_stored(kind.value_type)))
    if pa.types.is_struct(kind):
        return pa.struct([f.with_type(_stored(f.type)) for f in kind])
    return kind


def file_schema(schema: pa.Schema) -> pa.Schema:
    """A data file's schema: ``_wal_seq`` first, then the stream's columns, as
    Spark's staging writes them."""
    return pa.schema([pa.field(SEQ_COLUMN, pa.int64()), *schema])


def write_task_file(
    location: str,
    storage: Storage,
    batch_id: int,
    attempt: str,
    partition: int,
    batches: Iterable[pa.RecordBatch],
    schema: pa.Schema,
    order_by: str | None = None,
) -> TaskFile | None:
    """Write a task's rows (``batches``, cast to ``schema``, the WAL's form) as one
    Parquet file of batch ``batch_id``; None when the task had no rows.

    ``attempt`` names the directory shared by the tasks of one attempt to stage
    the batch; each task's file name is unique, so a retried task never overwrites
    what another attempt wrote.
    """
    rows = _ordered(batches, order_by) if order_by else batches
    relative = (
        f"{BATCH_COLUMN}={batch_id}/{attempt}/"
        f"part-{partition:05d}-{uuid.uuid4().hex}.snappy.parquet"
    )
    fs, root = storage.filesystem(location)
    path = f"{root}/{relative}"
    first = partition << PARTITION_SHIFT
    seq = first
    order: list[pa.ChunkedArray] = []
    try:
        out = writer = None
        for group in _groups(rows, schema):
            if writer is None:
                if isinstance(fs, pafs.LocalFileSystem):
                    fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
                out = fs.open_output_stream(path)
                layout = file_schema(schema)
                writer = pq.ParquetWriter(out, layout, **parquet_write_options(layout))
            ids = pa.array(range(seq, seq + group.num_rows), pa.int64())
            writer.write_table(group.add_column(0, SEQ_COLUMN, ids))
            if order_by:
                order.append(group.column(order_by))
            seq += group.num_rows
        if writer is None:
            return None
        writer.close()
        size = out.tell()
        out.close()
    except Exception as e:
        raise storage_error(e, join(location, relative), batch_id=batch_id) from e
    written = WrittenFile(
        path=relative,
        size=size,
        modified_ms=int(time.time() * 1000),
        rows=seq - first,
        min_seq=first,
        max_seq=seq - 1,
    )
    return TaskFile(written, _range(order) if order_by else None)


def _ordered(batches: Iterable[pa.RecordBatch], order_by: str) -> list[pa.RecordBatch]:
    """A task's rows sorted on ``order_by``, nulls first; equal values keep the
    order they came in (the sort is stable)."""
    table = pa.Table.from_batches(list(batches))
    if table.num_rows == 0:
        return []
    column = table.column(order_by)
    nulls = pc.indices_nonzero(pc.is_null(column))
    values = pc.indices_nonzero(pc.is_valid(column))
    ranked = pc.sort_indices(pc.take(column, values))
    order = pa.concat_arrays([nulls, pc.take(values, ranked)])
    return table.take(order).to_batches()


def _groups(batches: Iterable[pa.RecordBatch], schema: pa.Schema) -> Iterator[pa.Table]:
    """The rows in tables of about a row group each, cast to ``schema``."""
    waiting: list[pa.RecordBatch] = []
    rows = size = 0
    for batch in batches:
        if batch.num_rows == 0:
            continue
        waiting.append(batch)
        rows += batch.num_rows
        size += batch.nbytes
        if rows >= GROUP_ROWS or size >= GROUP_BYTES:
            yield _table(waiting, schema)
            waiting, rows, size = [], 0, 0
    if waiting:
        yield _table(waiting, schema)


def _table(batches: list[pa.RecordBatch], schema: pa.Schema) -> pa.Table:
    table = pa.Table.from_batches(batches)
    if table.schema != schema:
        table = table.cast(schema)
    return table


def _range(columns: list[pa.ChunkedArray]) -> OrderRange:
    values = pa.chunked_array([c for col in columns for c in col.chunks])
    low_high = pc.min_max(values)
    return OrderRange(
        low_high["min"].as_py(), low_high["max"].as_py(), values.null_count > 0
    )
