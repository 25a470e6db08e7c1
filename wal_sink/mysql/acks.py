"""The ack table's SQL, in one place: one row per applied batch, written in that
batch's own transaction (docs/protocol.md), so "applied" and "acknowledged" are one
fact.

Readers never load every ack ever written: they ask for the id range that matters
(the WAL's staged batches) or for aggregates. Deciding that a batch is already applied
is done only by the unique insert or a locking read, never by a snapshot SELECT.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import (
    ColumnElement,
    Connection,
    Select,
    Table,
    delete,
    func,
    insert,
    literal,
    select,
    update,
)
from sqlalchemy.exc import DBAPIError, IntegrityError

from wal_sink.mysql.errors import DUPLICATE_KEY, error_code
from wal_sink.mysql.tables import APPLIED, QUARANTINED

UNKNOWN_COLUMN = 1054


@dataclass(frozen=True)
class Ack:
    batch_id: int
    rows: int
    deleted: int
    quarantined: int
    apply_id: str | None
    committed_at: datetime
    skipped: int = 0


@dataclass(frozen=True)
class AckSummary:
    count: int
    first: int | None
    last: int | None
    rows: int
    deleted: int
    quarantined: int
    last_commit_at: datetime | None
    skipped: int = 0


@dataclass(frozen=True)
class TableCounts:
    """What batches did to one of several tables (``""``: rows whose route named
    no table)."""

    upserted: int = 0
    deleted: int = 0
    skipped: int = 0
    set_aside: int = 0

    def __add__(self, other: TableCounts) -> TableCounts:
        return TableCounts(
            self.upserted + other.upserted,
            self.deleted + other.deleted,
            self.skipped + other.skipped,
            self.set_aside + other.set_aside,
        )


class AckTable:
    """The ack rows of one sink, and with several tables their per-table counts
    (``tables``, a row per batch and table, written in the batch's transaction)."""

    def __init__(self, table: Table, sink_id: str, tables: Table | None = None) -> None:
        self.table = table
        self.sink_id = sink_id
        self.tables = tables
        self._mine = table.c.sink_id == sink_id

    def _between(self, first: int, last: int):
        return self._mine & self.table.c.batch_id.between(first, last)

    def insert(
        self,
        conn: Connection,
        batch_id: int,
        epoch: int,
        apply_id: str,
        state: str = APPLIED,
    ) -> bool:
        """Insert the batch's ack row first; False when one exists (duplicate key).
        ``state`` is APPLIED, or QUARANTINED for a batch set aside whole.

        A failed statement does not end a MySQL transaction: the caller decides."""
        try:
            conn.execute(
                insert(self.table).values(
                    sink_id=self.sink_id,
                    batch_id=batch_id,
                    row_count=0,
                    deleted_count=0,
                    quarantined=0,
                    epoch=epoch,
                    committed_at=func.now(6),
                    apply_id=apply_id,
                    state=state,
                )
            )
        except IntegrityError as e:
            if error_code(e) == DUPLICATE_KEY:
                return False
            raise
        return True

    def complete(
        self,
        conn: Connection,
        batch_id: int,
        rows: int,
        deleted: int,
        quarantined: int,
        skipped: int = 0,
        tables: dict[str, TableCounts] | None = None,
    ) -> None:
        """Fill in the counts; ``skipped``: CDC upserts a newer delete made stale;
        ``tables``: the counts per table, with several."""
        conn.execute(
            update(self.table)
            .where(self._between(batch_id, batch_id))
            .values(
                row_count=rows,
                deleted_count=deleted,
                quarantined=quarantined,
                skipped_count=skipped,
                committed_at=func.now(6),
            )
        )
        if self.tables is not None and tables:
            conn.execute(
                insert(self.tables),
                [
                    {
                        "sink_id": self.sink_id,
                        "batch_id": batch_id,
                        "table_name": name,
                        "row_count": c.upserted,
                        "deleted_count": c.deleted,
                        "quarantined": c.set_aside,
                        "skipped_count": c.skipped,
                    }
                    for name, c in tables.items()
                ],
            )

    def remove(self, conn: Connection, batch_id: int) -> None:
        """Drop one ack row (a forced replay replaces it in the same transaction)."""
        conn.execute(delete(self.table).where(self._between(batch_id, batch_id)))
        self._forget_tables(conn, [batch_id])

    def table_counts(self, conn: Connection) -> dict[str, TableCounts]:
        """Counts per table over this sink's acked batches (several tables)."""
        if self.tables is None:
            return {}
        c = self.tables.c
        rows = conn.execute(
            select(
                c.table_name,
                func.sum(c.row_count),
                func.sum(c.deleted_count),
                func.sum(c.skipped_count),
                func.sum(c.quarantined),
            )
            .where(c.sink_id == self.sink_id)
            .group_by(c.table_name)
        ).all()
        return {r[0]: TableCounts(*(int(v) for v in r[1:])) for r in rows}

    def _forget_tables(self, conn: Connection, batch_ids: list[int]) -> None:
        if self.tables is not None and batch_ids:
            c = self.tables.c
            conn.execute(
                delete(self.tables).where(
                    (c.sink_id == self.sink_id) & c.batch_id.in_(batch_ids)
                )
            )

    def locked(self, conn: Connection, first: int, last: int) -> dict[int, Ack]:
        """The acks of batches ``first``..``last``, read with row locks: waits for a
        transaction still committing them, so its outcome is what is seen."""
        c = self.table.c
        rows = conn.execute(
            select(
                c.batch_id,
                c.row_count,
                c.deleted_count,
                c.quarantined,
                c.apply_id,
                c.committed_at,
                c.skipped_count,
            )
            .where(self._between(first, last))
            .with_for_update()
        ).all()
        return {r[0]: Ack(*r) for r in rows}

    def acked_between(self, conn: Connection, first: int, last: int) -> set[int]:
        """Ids of acked batches in ``first``..``last`` (a plain read: for planning
        and reporting, never for deciding to apply)."""
        return set(
            conn.execute(
                select(self.table.c.batch_id).where(self._between(first, last))
            ).scalars()
        )

    def apply_ids(
        self, conn: Connection, first: int, last: int
    ) -> dict[int, str | None]:
        """The apply that wrote each ack in ``first``..``last`` (a plain read); none
        from an ack table of 0.1 not upgraded yet."""
        c = self.table.c
        try:
            return dict(
                conn.execute(
                    select(c.batch_id, c.apply_id).where(self._between(first, last))
                ).all()
            )
        except DBAPIError as e:
            if error_code(e) != UNKNOWN_COLUMN:
                raise
            return {}

    def committed_at(
        self, conn: Connection, first: int, last: int
    ) -> dict[int, datetime]:
        c = self.table.c
        return dict(
            conn.execute(
                select(c.batch_id, c.committed_at).where(self._between(first, last))
            ).all()
        )

    def set_aside(self, conn: Connection) -> list[int]:
        """Batches acked as quarantined (set aside whole, never applied), of the ack
        rows kept (a purge drops those of purged batches). An ack table from before
        0.3, not upgraded yet, has none."""
        try:
            return list(
                conn.execute(
                    select(self.table.c.batch_id)
                    .where(self._mine & (self.table.c.state == QUARANTINED))
                    .order_by(self.table.c.batch_id)
                ).scalars()
            )
        except DBAPIError as e:
            if error_code(e) != UNKNOWN_COLUMN:
                raise
            return []

    def newest(self, conn: Connection) -> int | None:
        """The highest acked batch id (batches are applied in order, I8)."""
        return conn.execute(
            select(func.max(self.table.c.batch_id)).where(self._mine)
        ).scalar_one()

    def summary(self, conn: Connection) -> AckSummary:
        """Counts over this sink's ack rows (an ack table from before 0.3, not
        upgraded yet, has no skipped rows)."""
        c = self.table.c
        skipped = func.coalesce(func.sum(c.skipped_count), 0)
        try:
            row = conn.execute(self._summary(skipped)).one()
        except DBAPIError as e:
            if error_code(e) != UNKNOWN_COLUMN:
                raise
            row = conn.execute(self._summary(literal(0))).one()
        count, first, last, rows, deleted, quarantined, at, skipped = row
        return AckSummary(
            count,
            first,
            last,
            int(rows),
            int(deleted),
            int(quarantined),
            at,
            int(skipped),
        )

    def _summary(self, skipped: ColumnElement) -> Select:
        c = self.table.c
        return select(
            func.count(),
            func.min(c.batch_id),
            func.max(c.batch_id),
            func.coalesce(func.sum(c.row_count), 0),
            func.coalesce(func.sum(c.deleted_count), 0),
            func.coalesce(func.sum(c.quarantined), 0),
            func.max(c.committed_at),
            skipped,
        ).where(self._mine)

    def forget(self, conn: Connection, batch_ids: list[int]) -> int:
        """Drop the acks of batches purged from the WAL, keeping the newest ack row
        (what recovery and the checkpoint check (I7) need). Returns rows deleted."""
        newest = self.newest(conn)
        ids = [b for b in batch_ids if b != newest]
        deleted = 0
        for start in range(0, len(ids), 1000):
            chunk = ids[start : start + 1000]
            deleted += conn.execute(
                delete(self.table).where(self._mine & self.table.c.batch_id.in_(chunk))
            ).rowcount
            self._forget_tables(conn, chunk)
        return deleted
