"""Helpers shared by test modules (a test module never imports another one)."""

from __future__ import annotations

import uuid
from typing import Any

import pyarrow as pa

from wal_sink.config import Config
from wal_sink.spark.driver_stage import write_file
from wal_sink.wal.format import BATCH_COLUMN, SEQ_COLUMN
from wal_sink.wal.writer import WalWriter


def stage_rows(
    config: Config, batch_id: int, rows: list[dict[str, Any]], schema: pa.Schema
) -> bool:
    """Stage ``rows`` (of ``schema``, in this order) as batch ``batch_id`` of the
    sink's WAL the way a small batch is staged from the driver: one Parquet file
    written by pyarrow, committed with delta-rs. No Spark, no JVM. Returns whether
    this call staged it (False: the WAL had the batch already)."""
    table = pa.Table.from_pylist(rows, schema=schema)
    table = table.add_column(0, SEQ_COLUMN, pa.array(range(table.num_rows), pa.int64()))
    writer = WalWriter(config.wal_path, config.sink.id, config.storage)
    attempt = f"{BATCH_COLUMN}={batch_id}/{uuid.uuid4().hex}"
    written = write_file(writer, attempt, table, batch_id)
    return writer.commit(batch_id, [written], table.schema)
