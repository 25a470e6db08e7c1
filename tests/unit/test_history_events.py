"""A type 2 chunk's events in Arrow (protocol/history_events.py)."""

from __future__ import annotations

from datetime import datetime

import pyarrow as pa

from wal_sink.config import CdcConfig
from wal_sink.protocol.history_events import arrow_events

NOW = datetime(2026, 1, 1)
TOKEN = "t" * 24


def chunk(**columns) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(columns)


def test_a_chunk_whose_records_were_all_set_aside_has_no_events():
    """Found by the fuzzer: an empty chunk (every record screened out) failed."""
    empty = chunk(id=pa.array([], pa.int64()), v=pa.array([], pa.int64()))
    assert arrow_events(empty, ["id", "v"], ["id"], "v", None, (), TOKEN, NOW) is None


def test_a_delete_keeps_its_key_and_version_only_and_each_row_its_token():
    cdc = CdcConfig(op_column="op", order_by="v")
    rows = chunk(
        id=pa.array([1, 2], pa.int64()),
        n=pa.array([5, 6], pa.int64()),
        v=pa.array([3, 4], pa.int64()),
        op=["U", "D"],
    )
    events = arrow_events(rows, ["id", "n", "v"], ["id"], "v", cdc, (), TOKEN, NOW)
    assert events is not None
    got = events.to_pydict()
    assert got["n"] == [5, None] and got["v"] == [3, None] and got["id"] == [1, 2]
    assert got["_wal_sequence"] == [3, 4] and got["_wal_op"] == ["U", "D"]
    assert got["_wal_applied_by"] == [TOKEN + "00000000", TOKEN + "00000001"]
    assert got["_wal_applied_at"] == [NOW, NOW]


def test_a_record_that_would_not_become_an_event_leaves_the_chunk_to_rows():
    """A NULL version, or a NULL an upsert sends to a NOT NULL column."""
    no_version = chunk(id=pa.array([1], pa.int64()), v=pa.array([None], pa.int64()))
    assert (
        arrow_events(no_version, ["id", "v"], ["id"], "v", None, (), TOKEN, NOW) is None
    )
    required = chunk(
        id=pa.array([1], pa.int64()),
        n=pa.array([None], pa.int64()),
        v=pa.array([1], pa.int64()),
    )
    assert (
        arrow_events(required, ["id", "n", "v"], ["id"], "v", None, {"n"}, TOKEN, NOW)
        is None
    )
