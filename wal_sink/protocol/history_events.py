"""A chunk's events for a type 2 target built in Arrow, to be sent as multi-row
INSERTs rendered column by column (mysql/multi_row.py) instead of a Python dict per
row: the same rows protocol/history_rows.py builds one by one — the written
columns, for a ``[cdc]`` delete its key only, the version as ``_wal_sequence``,
the op, the chunk's token with the row's number, and the time (naive UTC).

Only a chunk in which every record becomes an event is built here (no NULL key or
version, no NULL an upsert would send to a NOT NULL column); any other takes the
row-by-row way, which sets the rest aside one by one.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime
from functools import lru_cache

import pyarrow as pa
import pyarrow.compute as pc

from wal_sink.config import CdcConfig
from wal_sink.mysql.history import (
    APPLIED_AT,
    APPLIED_BY,
    DELETE,
    OP,
    SEQUENCE,
    UPSERT,
)
from wal_sink.mysql.history_floors import row_token


def arrow_events(
    chunk: pa.RecordBatch,
    written: Sequence[str],
    key: Sequence[str],
    version_column: str,
    cdc: CdcConfig | None,
    required: Collection[str],
    token: str,
    now: datetime,
) -> pa.RecordBatch | None:
    """The events of ``chunk``, or None when a record of it would not become one
    (or its op column is not text, which the row-by-row way compares as sent)."""
    rows = chunk.num_rows
    names = chunk.schema.names
    if not rows:
        return None  # every record set aside before (the screen)
    if version_column not in names or chunk.column(version_column).null_count:
        return None
    if any(k not in names or chunk.column(k).null_count for k in key):
        return None
    deletes = pa.array([False] * rows, pa.bool_())
    if cdc is not None and cdc.op_column in names:
        op = chunk.column(cdc.op_column)
        if not pa.types.is_string(op.type):
            return None
        deletes = pc.fill_null(
            pc.is_in(op, value_set=pa.array(cdc.delete_values)), False
        )
    upserts = pc.invert(deletes)
    if any(
        pc.any(pc.and_(pc.is_null(chunk.column(c)), upserts)).as_py()
        for c in written
        if c in required
    ):
        return None
    columns = {
        c: chunk.column(c)
        if c in key
        else pc.if_else(deletes, pa.nulls(rows, chunk.column(c).type), chunk.column(c))
        for c in written
    }
    columns[SEQUENCE] = chunk.column(version_column)
    columns[OP] = pc.if_else(deletes, DELETE, UPSERT)
    columns[APPLIED_BY] = pc.binary_join_element_wise(token, _row_numbers(rows), "")
    columns[APPLIED_AT] = pa.repeat(pa.scalar(now, pa.timestamp("us")), rows)
    return pa.RecordBatch.from_arrays(list(columns.values()), names=list(columns))


@lru_cache(maxsize=4)
def _row_numbers(rows: int) -> pa.Array:
    """Each row's number as a ``_wal_applied_by`` ends after the chunk's token,
    made once per chunk size (a batch's chunks are of one size but its last)."""
    return pa.array([row_token("", i) for i in range(rows)], pa.string())
