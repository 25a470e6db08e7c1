"""The WAL's schema as batches change their columns (without Spark): a batch may add
nullable columns; it may not drop one or change its type."""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import Schema

from wal_sink.errors import TerminalError
from wal_sink.wal.writer import evolved_schema, table_schema

FIRST = pa.schema([("k", pa.string()), ("amount", pa.int64())])


def wal(files: pa.Schema) -> Schema:
    return table_schema(files.append(pa.field("_wal_batch_id", pa.int64())))


def names(schema: Schema) -> list[str]:
    return [f.name for f in schema.fields]


def test_the_same_columns_in_another_order_change_nothing():
    reordered = pa.schema([("amount", pa.int64()), ("k", pa.string())])
    assert evolved_schema(wal(FIRST), wal(reordered), "s", 1) is None


def test_new_columns_are_appended_nullable():
    current = wal(FIRST)
    later = wal(FIRST.append(pa.field("label", pa.string(), nullable=False)))
    merged = evolved_schema(current, later, "s", 1)
    assert names(merged) == [*names(current), "label"]
    assert all(f.nullable for f in merged.fields)


def test_a_column_earlier_batches_have_is_refused_when_missing():
    with pytest.raises(TerminalError, match="'amount' is missing from this batch"):
        evolved_schema(wal(FIRST), wal(pa.schema([("k", pa.string())])), "s", 4)


def test_a_column_that_changes_type_is_refused_naming_both_types():
    changed = pa.schema([("k", pa.string()), ("amount", pa.float64())])
    with pytest.raises(TerminalError) as info:
        evolved_schema(wal(FIRST), wal(changed), "s", 4)
    assert "'amount' changes type from long to double" in str(info.value)
    assert info.value.batch_id == 4 and "\n" not in str(info.value)
