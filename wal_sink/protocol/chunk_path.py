"""Which way one chunk of a batch goes to MySQL, and the ladder from one way down to
the next, in one place. The ways, top down:

- **bulk load**: LOAD DATA LOCAL INFILE into a load table (``mysql.local_infile``),
  while the server has not refused it;
- **multi-row**: INSERTs with the VALUES list rendered in Arrow;
- **row by row**: value by value (row_by_row.py), which sets aside null keys and
  isolates rows MySQL rejects. It takes what the others cannot: CDC chunks (their
  statements have neither of the others), a session that would not read rendered
  text exactly, a null key, a value without an exact text form (NaN, infinity), a
  negative amount for an ``add`` column that is UNSIGNED (the row it would insert
  is out of range even where the sum is not: row by row updates such a row by key).

``decide`` picks a chunk's first way; batch_rows.py asks it on the prefetch thread,
one chunk ahead. ``ChunkPaths.apply`` takes that way, deciding again when the
decision made ahead no longer holds, and a chunk that the bulk load or the
multi-row path fails with (LOAD DATA refused or warning, a row MySQL rejects) falls
to the next way down; row by row takes every chunk.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol

import pyarrow as pa
from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError

from wal_sink.errors import first_line
from wal_sink.mysql.acks import TableCounts
from wal_sink.mysql.bulk_load import (
    BulkLoader,
    BulkLoadRefused,
    BulkLoadWarned,
    say_refused,
)
from wal_sink.mysql.errors import is_row_error
from wal_sink.mysql.multi_row import MultiRowUpsert
from wal_sink.protocol.row_by_row import ByKeyColumns
from wal_sink.wal.quarantine import Entry


class ChunkPath(Enum):
    BULK_LOAD = "bulk load"
    MULTI_ROW = "multi-row"
    ROW_BY_ROW = "row by row"


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
    by_key: ByKeyColumns = (),
) -> Decision:
    """The way ``chunk`` goes, with ``multi`` and ``loader`` its schema's fast
    statements (None where its schema has none), rendering its multi-row
    statements when it goes that way; a chunk holding a value of ``by_key`` goes
    row by row, where such a row goes by key."""
    if (
        not render
        or any(chunk.column(k).null_count for k in key)
        or any(way.in_chunk(chunk.column(c)) for c, way in by_key)
    ):
        path = ChunkPath.ROW_BY_ROW
    elif loader is not None and bulk_load:
        path = ChunkPath.BULK_LOAD
    elif multi is not None and multi.renders(chunk):
        path = ChunkPath.MULTI_ROW
    else:
        path = ChunkPath.ROW_BY_ROW
    statements = multi.render(chunk) if path is ChunkPath.MULTI_ROW else None
    return Decision(path, render, bulk_load, statements)


@dataclass(frozen=True)
class AppliedRows:
    """What applying rows to the target did."""

    upserted: int = 0
    deleted: int = 0
    skipped: int = 0
    """CDC upserts a newer delete made stale: not applied, not set aside."""
    set_aside: list[Entry] = field(default_factory=list)
    """Rows set aside for the quarantine, in staged order, with their reason."""
    tables: dict[str, TableCounts] = field(default_factory=dict)
    """Per table, with several tables (``""``: rows whose route names none)."""

    def __add__(self, other: AppliedRows) -> AppliedRows:
        """Both counts of one table, in order (no per-table counts)."""
        return AppliedRows(
            self.upserted + other.upserted,
            self.deleted + other.deleted,
            self.skipped + other.skipped,
            self.set_aside + other.set_aside,
        )


class FastWays(Protocol):
    """A schema's statements for the ways above row by row (None where it has
    none), and the values its rows cannot carry (row_by_row.needs_update)."""

    multi: MultiRowUpsert | None
    loader: BulkLoader | None
    by_key: ByKeyColumns


class ChunkPaths:
    """The ladder of one row applier: each chunk's way, and its fall to the next
    way down when one fails it."""

    def __init__(self, sink_id: str, key: Sequence[str]) -> None:
        self.sink_id = sink_id
        self.key = key
        self.render = True
        """The session of the batch being applied reads rendered text exactly."""
        self.bulk_load_allowed = True
        """LOAD DATA is tried until the server refuses it (then never again)."""

    def decide(
        self, chunk: pa.RecordBatch, ways: FastWays, *, bulk_load: bool | None = None
    ) -> Decision:
        """The way ``chunk`` goes now (``bulk_load``: whether LOAD DATA may be
        tried, if not as far as the server allows)."""
        return decide(
            chunk,
            self.key,
            ways.multi,
            ways.loader,
            render=self.render,
            bulk_load=self.bulk_load_allowed if bulk_load is None else bulk_load,
            by_key=ways.by_key,
        )

    def apply(
        self,
        conn: Connection,
        chunk: pa.RecordBatch,
        ways: FastWays,
        ahead: Decision | None,
        row_by_row: Callable[[], AppliedRows],
    ) -> AppliedRows:
        """Apply ``chunk`` the way decided ``ahead`` (None: its schema's statements
        were not built yet), or decided again where that no longer holds (LOAD DATA
        refused since, on this thread); a way that fails it falls to the next down.
        ``row_by_row`` applies it the last way down, which takes every chunk."""
        decision = (
            ahead
            if ahead is not None and ahead.holds(self.render, self.bulk_load_allowed)
            else self.decide(chunk, ways)
        )
        if decision.path is ChunkPath.BULK_LOAD:
            applied = self._attempt(conn, ways.loader.apply, chunk)
            if applied is not None:
                return AppliedRows(applied)
            decision = self.decide(chunk, ways, bulk_load=False)
        if decision.path is ChunkPath.MULTI_ROW:
            applied = self._multi_row(conn, chunk, ways.multi, decision.statements)
            if applied is not None:
                return AppliedRows(applied)
        return row_by_row()

    def _multi_row(
        self,
        conn: Connection,
        chunk: pa.RecordBatch,
        multi: MultiRowUpsert,
        statements: list[str],
    ) -> int | None:
        """The chunk as its rendered multi-row INSERTs; None when MySQL rejected a
        row (the next way down isolates it)."""
        apply = functools.partial(multi.apply, statements=statements)
        if len(statements) > 1:
            return self._attempt(conn, apply, chunk)
        # One statement needs no savepoint: InnoDB (preflight) undoes a failed
        # statement's effects by itself, and the transaction goes on.
        try:
            return apply(conn, chunk)
        except DBAPIError as e:
            if not is_row_error(e):
                raise  # the transaction is retried whole
            return None

    def _attempt(
        self,
        conn: Connection,
        apply: Callable[[Connection, pa.RecordBatch], int],
        chunk: pa.RecordBatch,
    ) -> int | None:
        """``apply`` under a savepoint; None when it refused or MySQL rejected a row."""
        savepoint = conn.begin_nested()
        try:
            applied = apply(conn, chunk)
        except BulkLoadRefused as e:
            savepoint.rollback()
            self.bulk_load_allowed = False
            say_refused(self.sink_id, first_line(e))
            return None
        except BulkLoadWarned:
            savepoint.rollback()
            return None
        except DBAPIError as e:
            if not is_row_error(e):
                raise  # the transaction is retried whole
            savepoint.rollback()
            return None
        savepoint.commit()
        return applied
