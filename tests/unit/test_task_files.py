"""What one task of the data source writes into the WAL: ``_wal_seq`` in stage
order with the partition in the high bits, the file's exact add-action facts, the
WAL's types, and with CDC rows sorted on the order column."""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from wal_sink.errors import TerminalError
from wal_sink.storage import Storage
from wal_sink.wal import task_files
from wal_sink.wal.task_files import file_schema, wal_schema, write_task_file

SPARK_LIKE = pa.schema(
    [
        ("k", pa.int64()),
        ("label", pa.large_string()),
        ("at", pa.timestamp("us", "Etc/UTC")),
        ("tags", pa.large_list(pa.large_string())),
    ]
)


def batches(rows: int, per_batch: int, start: int = 0) -> list[pa.RecordBatch]:
    at = datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=timezone.utc)
    out = []
    for first in range(start, start + rows, per_batch):
        ks = list(range(first, min(first + per_batch, start + rows)))
        out.append(
            pa.record_batch(
                [
                    pa.array(ks, pa.int64()),
                    pa.array([f"r{k}" for k in ks], pa.large_string()),
                    pa.array([at] * len(ks), pa.timestamp("us", "Etc/UTC")),
                    pa.array([["x"]] * len(ks), pa.large_list(pa.large_string())),
                ],
                schema=SPARK_LIKE,
            )
        )
    return out


def test_seq_rises_in_stage_order_with_the_partition_high(tmp_path, monkeypatch):
    monkeypatch.setattr(task_files, "GROUP_ROWS", 250)  # several row groups
    schema = wal_schema(SPARK_LIKE)
    written = write_task_file(
        str(tmp_path), Storage(), 7, "att", 3, batches(1000, 100), schema
    )
    f = written.file
    assert f.path.startswith("_wal_batch_id=7/att/part-00003-")
    assert (f.rows, f.min_seq, f.max_seq) == (1000, 3 << 33, (3 << 33) + 999)
    data = pq.ParquetFile(tmp_path / f.path)
    assert data.metadata.num_row_groups == 4
    assert f.size == os.path.getsize(tmp_path / f.path), "the exact byte count"
    table = data.read()
    assert table.column_names == ["_wal_seq", "k", "label", "at", "tags"]
    seq = table.column("_wal_seq").to_pylist()
    assert seq == [(3 << 33) + i for i in range(1000)]
    assert table.column("k").to_pylist() == list(range(1000)), "rows in arrival order"
    for group in range(4):  # delta-encoded, no dictionary (as every WAL writer)
        column = data.metadata.row_group(group).column(0)
        assert "DELTA_BINARY_PACKED" in column.encodings
        assert not column.has_dictionary_page
        tags = data.metadata.row_group(group).column(4)  # a nested column's leaf
        assert tags.path_in_schema == "tags.list.element"
        assert tags.has_dictionary_page, "a repeated value keeps its dictionary"


def test_types_are_stored_as_spark_stages_them(tmp_path):
    schema = wal_schema(SPARK_LIKE)
    f = write_task_file(str(tmp_path), Storage(), 0, "a", 0, batches(3, 3), schema)
    data = pq.ParquetFile(tmp_path / f.file.path)
    assert data.schema_arrow == file_schema(schema)
    assert data.schema_arrow.field("label").type == pa.string()
    assert data.schema_arrow.field("tags").type == pa.list_(pa.string())
    assert data.schema_arrow.field("at").type == pa.timestamp("us", "UTC")
    at = json.loads(data.schema.column(3).logical_type.to_json())
    assert (at["isAdjustedToUTC"], at["timeUnit"]) == (True, "microseconds")
    assert data.metadata.row_group(0).column(3).physical_type == "INT64", "not INT96"


def test_a_task_without_rows_writes_no_file(tmp_path):
    schema = wal_schema(SPARK_LIKE)
    empty = pa.record_batch([pa.array([], t) for t in SPARK_LIKE.types], SPARK_LIKE)
    assert write_task_file(str(tmp_path), Storage(), 1, "a", 0, [empty], schema) is None
    assert not any(tmp_path.rglob("*.parquet"))


def test_cdc_rows_are_sorted_on_the_order_column_nulls_first(tmp_path):
    schema = pa.schema([("k", pa.int64()), ("seq", pa.int64())])
    seqs = pa.array([30, None, 10, 30])
    came = pa.record_batch([pa.array([1, 2, 3, 4]), seqs], schema)
    f = write_task_file(str(tmp_path), Storage(), 0, "a", 1, [came], schema, "seq")
    table = pq.read_table(tmp_path / f.file.path)
    assert table.column("seq").to_pylist() == [None, 10, 30, 30]
    assert table.column("k").to_pylist() == [2, 3, 1, 4], "stable for equal values"
    assert (f.order.low, f.order.high, f.order.has_null) == (10, 30, True)


def test_reserved_column_names_are_refused():
    with pytest.raises(TerminalError, match="reserved prefix '_wal_'"):
        wal_schema(pa.schema([("k", pa.int64()), ("_wal_seq", pa.int64())]))
