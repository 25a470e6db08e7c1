"""Quarantine records read back as typed rows (no MySQL, no Spark): every value as
its WAL column's type, nested values as JSON text, absent columns left out, and a
value that does not read back named, not guessed."""

from __future__ import annotations

import json
from datetime import date, datetime, time, timezone
from decimal import Decimal

import pyarrow as pa
import pytest

from wal_sink.mysql.row_screen import (
    RECORD_CUT,
    invalid_utf8,
    oversized,
    record_is_partial,
)
from wal_sink.wal.quarantine import record_json
from wal_sink.wal.quarantine_records import RecordTypeError, chunks, typed_row

COLUMNS = {
    "k": pa.string(),
    "n": pa.int64(),
    "f": pa.float64(),
    "d": pa.decimal128(38, 18),
    "at": pa.timestamp("us", tz="UTC"),
    "ntz": pa.timestamp("us"),
    "day": pa.date32(),
    "t": pa.time64("us"),
    "b": pa.binary(),
    "ok": pa.bool_(),
    "tags": pa.list_(pa.string()),
}


def roundtrip(record: dict) -> dict:
    """A record as the committer writes it, read back."""
    schema, values = typed_row(json.loads(record_json(record)), COLUMNS)
    return pa.RecordBatch.from_pylist([values], schema=schema).to_pylist()[0]


def test_every_type_reads_back_as_it_was():
    at = datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=timezone.utc)
    record = {
        "k": "é'\\",
        "n": -(2**63),
        "f": 0.1,
        "d": Decimal("0.000000000000000001"),
        "at": at,
        "ntz": datetime(1999, 12, 31, 23, 59, 59, 999999),
        "day": date(2000, 2, 29),
        "t": time(12, 30, 1, 5),
        "b": b"\x00'\xff",
        "ok": False,
    }
    assert roundtrip(record) == record


def test_the_driver_paths_naive_utc_and_nan_read_back():
    got = roundtrip({"at": datetime(2026, 1, 2, 3, 4, 5), "f": float("inf")})
    assert got["at"] == datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    assert got["f"] == float("inf")


def test_nested_values_stay_json_text_and_absent_columns_stay_out():
    schema, values = typed_row({"k": "a", "tags": '["x","y"]'}, COLUMNS)
    assert schema.names == ["k", "tags"] and schema.field("tags").type == pa.string()
    assert values["tags"] == '["x","y"]'
    _, raw = typed_row({"tags": ["x", {"y": 1}]}, COLUMNS)  # quarantine-batch rows
    assert raw["tags"] == '["x",{"y":1}]'


def test_a_record_spelt_in_another_case_reads_back_as_its_wal_columns():
    """A row a table set aside is spelt as the table spells its columns, the WAL as
    the stream does: names ignore case, as MySQL's do."""
    record = json.loads(record_json({"AT": datetime(2040, 1, 1), "D": Decimal("1.5")}))
    schema, values = typed_row(record, COLUMNS)
    assert [f.type for f in schema] == [COLUMNS["at"], COLUMNS["d"]]
    assert values == {"AT": datetime(2040, 1, 1), "D": Decimal("1.5")}


def test_a_column_the_wal_lacks_takes_its_json_type():
    schema, _ = typed_row({"new": 3, "text": "t", "gone": None}, COLUMNS)
    assert [f.type for f in schema] == [pa.int64(), pa.string(), pa.null()]


@pytest.mark.parametrize(
    "record, says",
    [
        ({"n": "12"}, "column 'n' does not read back as int64"),
        ({"n": True}, "column 'n'"),
        ({"d": "lots"}, "column 'd' does not read back as decimal128(38, 18)"),
        ({"at": "datetime.datetime(2026, 1, 1)"}, "column 'at'"),
        ({"b": "not hex"}, "column 'b'"),
        ({"ok": 1}, "column 'ok'"),
    ],
)
def test_a_value_that_does_not_read_back_is_named(record, says):
    with pytest.raises(
        RecordTypeError, match=says.replace("(", r"\(").replace(")", r"\)")
    ):
        typed_row(record, COLUMNS)


def test_consecutive_rows_of_one_schema_share_a_chunk_in_order():
    rows = [
        typed_row({"k": "a", "n": 1}, COLUMNS),
        typed_row({"k": "b", "n": 2}, COLUMNS),
        typed_row({"k": "c"}, COLUMNS),
        typed_row({"k": "d", "n": 4}, COLUMNS),
    ]
    found = [c.to_pylist() for c in chunks(rows, 10)]
    assert found == [
        [{"k": "a", "n": 1}, {"k": "b", "n": 2}],
        [{"k": "c"}],
        [{"k": "d", "n": 4}],
    ]
    assert [c.num_rows for c in chunks(rows[:2] * 3, 4)] == [4, 2]


def test_records_of_rows_cut_or_shown_in_hex_are_partial():
    text = pa.array([b"a" * 3000, b"\xff"]).view(pa.string())
    chunk = pa.RecordBatch.from_arrays([pa.array(["k1", "k2"]), text], names=["k", "v"])
    (too_big,) = oversized(chunk, ("k",), 4000).values()
    (not_utf8,) = invalid_utf8(chunk).values()
    assert record_is_partial(too_big) and str(RECORD_CUT) in too_big
    assert record_is_partial(not_utf8) and "not UTF-8" in not_utf8
    assert not record_is_partial('MySQL error 1406: (1406, "Data too long")')
