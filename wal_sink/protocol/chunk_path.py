"""Which way one chunk of a batch goes to MySQL, decided in one place (batch_rows.py
asks it on the prefetch thread, one chunk ahead, and again on the committer's thread
when the decision made ahead no longer holds).

- **bulk load**: LOAD DATA LOCAL INFILE into a staging table (``mysql.local_infile``),
  while the server has not refused it;
- **multi-row**: INSERTs with the VALUES list rendered in Arrow;
- **driver**: value by value through the driver, which sets aside null keys and
  isolates rows MySQL rejects. It takes what the others cannot: CDC chunks (their
  statements have neither of the others), a session that would not read rendered
  text exactly, a null key, a value without an exact text form (NaN, infinity), a
  negative amount for an ``add`` column that is UNSIGNED (the row it would insert
  is out of range even where the sum is not: the driver updates such a row by key).

A chunk that the bulk load or the multi-row path fails with (LOAD DATA refused or
warning, a row MySQL rejects) falls back to the next path down.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

import pyarrow as pa
import pyarrow.compute as pc

from wal_sink.mysql.bulk_load import BulkLoader
from wal_sink.mysql.multi_row import MultiRowUpsert


class ChunkPath(Enum):
    BULK_LOAD = "bulk load"
    MULTI_ROW = "multi-row"
    DRIVER = "driver"


@dataclass(frozen=True)
class Decision:
    """How one chunk goes, and what the decision assumed of the row applier."""

    path: ChunkPath
    render: bool
    """The session reads rendered text exactly (per batch)."""
    bulk_load: bool
    """LOAD DATA was still allowed. It turns False on the committer's thread when
    the server refuses it, possibly after the next chunk was decided ahead."""
    statements: list[str] | None = None
    """The chunk's multi-row statements, rendered with the decision."""

    def holds(self, render: bool, bulk_load: bool) -> bool:
        """Whether the decision stands for the applier as it is now."""
        return (self.render, self.bulk_load) == (render, bulk_load)


def decide(
    chunk: pa.RecordBatch,
    key: Sequence[str],
    multi: MultiRowUpsert | None,
    loader: BulkLoader | None,
    *,
    render: bool,
    bulk_load: bool,
    unsigned_adds: Sequence[str] = (),
) -> Decision:
    """The way ``chunk`` goes, with ``multi`` and ``loader`` its schema's fast
    statements (None where its schema has none), rendering its multi-row
    statements when it goes that way; ``unsigned_adds`` are its UNSIGNED ``add``
    columns."""
    if (
        not render
        or any(chunk.column(k).null_count for k in key)
        or any(negative(chunk.column(c)) for c in unsigned_adds)
    ):
        path = ChunkPath.DRIVER
    elif loader is not None and bulk_load:
        path = ChunkPath.BULK_LOAD
    elif multi is not None and multi.renders(chunk):
        path = ChunkPath.MULTI_ROW
    else:
        path = ChunkPath.DRIVER
    statements = multi.render(chunk) if path is ChunkPath.MULTI_ROW else None
    return Decision(path, render, bulk_load, statements)


def negative(column: pa.Array) -> bool:
    """Whether ``column`` holds a value below zero."""
    lowest = pc.min(column).as_py()
    return lowest is not None and lowest < 0
