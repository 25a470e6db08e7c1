"""Rows MySQL cannot be sent, found in Arrow (no MySQL): text that is not UTF-8,
statements over max_allowed_packet, and nested values as JSON text."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from decimal import Decimal

import pyarrow as pa

from wal_sink.mysql.row_screen import (
    as_json_text,
    invalid_utf8,
    nested_columns,
    oversized,
    row_record,
)


def _strings(values: list[bytes | None]) -> pa.Array:
    """A string array holding these bytes unchecked, as Spark can write them."""
    raw = pa.array(values, pa.binary())
    return raw.view(pa.string())


def test_rows_holding_text_that_is_not_utf8_are_found_by_position():
    chunk = pa.RecordBatch.from_arrays(
        [
            pa.array(["a", "b", "c", "d"]),
            _strings([b"ok", b"\xff", None, "ü".encode()]),
            _strings([b"\xc3", b"fine", b"x", b"y"]),
        ],
        names=["k", "note", "other"],
    )
    found = invalid_utf8(chunk)
    assert sorted(found) == [0, 1]
    assert found[0].startswith("text that is not UTF-8 in column(s) other")
    assert "column(s) note" in found[1]
    assert row_record(chunk, 1) == {"k": "b", "note": b"\xff", "other": "fine"}


def test_statements_over_the_packet_are_found_and_deletes_count_their_key_only():
    big = "x" * 5000
    chunk = pa.RecordBatch.from_arrays(
        [
            pa.array(["U", "D", "U"]),
            pa.array(["k1", "k2", "k3"]),
            pa.array(["small", big, "'" * 2600]),  # quotes are escaped: 5200 bytes
        ],
        names=["op", "k", "v"],
    )
    deletes = pa.array([False, True, False])
    assert oversized(chunk, ("k",), 1 << 24, deletes) == {}
    found = oversized(chunk, ("k",), 7000, deletes)
    assert sorted(found) == [2], "the delete of k2 sends its key only"
    assert "more than the server's max_allowed_packet (7000)" in found[2]
    assert sorted(oversized(chunk, ("k",), 7000)) == [1, 2]
    assert row_record(chunk, 1, cut=10) == {"op": "D", "k": "k2", "v": "x" * 10}


def test_nested_columns_are_named_and_written_as_json():
    at = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    attrs_type = pa.struct(
        [
            ("price", pa.decimal128(8, 2)),
            ("at", pa.timestamp("us", tz="UTC")),
            ("raw", pa.binary()),
            ("n", pa.int32()),
        ]
    )
    chunk = pa.RecordBatch.from_arrays(
        [
            pa.array(["a", "b"]),
            pa.array(
                [
                    {"price": Decimal("1.50"), "at": at, "raw": b"\x00\x01", "n": None},
                    None,
                ],
                attrs_type,
            ),
            pa.array([["x", 'say "hi"'], []], pa.list_(pa.string())),
            pa.array(
                [[("nan", float("nan")), ("low", float("-inf"))], [("one", 2.5)]],
                pa.map_(pa.string(), pa.float64()),
            ),
        ],
        names=["k", "attrs", "tags", "scores"],
    )
    assert list(nested_columns(chunk.schema)) == ["attrs", "tags", "scores"]
    converted, bad = as_json_text(chunk)
    assert bad == {}
    assert converted.schema.field("attrs").type == pa.string()
    assert converted.column("attrs").to_pylist() == [
        '{"price":1.50,"at":"2026-01-02T03:04:05+00:00","raw":"AAE=","n":null}',
        None,
    ]
    assert converted.column("tags").to_pylist() == ['["x","say \\"hi\\""]', "[]"]
    assert converted.column("scores").to_pylist() == [
        '{"nan":"NaN","low":"-Infinity"}',
        '{"one":2.5}',
    ]
    for text in converted.column("attrs").to_pylist()[:1]:
        assert json.loads(text)["price"] == 1.5


def test_nested_values_holding_text_that_is_not_utf8_are_found():
    tags = pa.ListArray.from_arrays(
        pa.array([0, 1, 2], pa.int32()), _strings([b"ok", b"\xfe"])
    )
    chunk = pa.RecordBatch.from_arrays(
        [pa.array(["a", "b"]), tags], names=["k", "tags"]
    )
    converted, bad = as_json_text(chunk)
    assert list(bad) == [1] and "column(s) tags" in bad[1]
    assert converted.column("tags").to_pylist() == ['["ok"]', None]


def test_a_null_timestamp_of_versioned_cdc_is_left_to_the_stale_check():
    """With ``defer`` a NULL for a TIMESTAMP NOT NULL column is marked late
    at its row's place in the screened chunk, not set aside; without it, set aside."""
    from sqlalchemy import BIGINT, Column, MetaData, String, Table
    from sqlalchemy.dialects.mysql import TIMESTAMP

    from tests.helpers import config_dict
    from wal_sink.config import config_from_dict
    from wal_sink.protocol.screen import Screen

    table = Table(
        "t",
        MetaData(),
        Column("k", BIGINT, primary_key=True),
        Column("note", String(8)),
        Column("v", TIMESTAMP(fsp=6), nullable=False),
    )
    config = config_from_dict(config_dict(cdc={"op_column": "op", "order_by": "k"}))
    at = datetime(2001, 1, 1, tzinfo=timezone.utc)
    chunk = pa.RecordBatch.from_arrays(
        [
            pa.array([1, 2, 3, 4], pa.int64()),
            _strings([b"\xff", b"a", b"b", b"c"]),
            pa.array([None, None, None, at], pa.timestamp("us", tz="UTC")),
            pa.array(["I", "I", "D", "I"]),
        ],
        names=["k", "note", "v", "op"],
    )
    deferred = Screen(config, ("k",), table, 1 << 24, {}, [], defer=True)(chunk)
    assert [e.record["k"] for e in deferred.set_aside] == [1], "not UTF-8"
    assert deferred.chunk.column("k").to_pylist() == [2, 3, 4]
    assert list(deferred.late) == [0], "row k=2, first of the screened chunk"
    assert deferred.late[0].record["k"] == 2
    assert "NULL in TIMESTAMP NOT NULL column(s) v" in deferred.late[0].reason
    at_once = Screen(config, ("k",), table, 1 << 24, {}, [])(chunk)
    assert [e.record["k"] for e in at_once.set_aside] == [1, 2], "k=3 deletes"
    assert at_once.late == {}
