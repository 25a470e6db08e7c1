"""Rows a batch sets aside travel to the quarantine table through an outbox in MySQL.

The committer inserts them into the outbox inside the batch's own transaction, next
to its ack row: if the transaction rolls back, so do they, and a retry that sets
aside other rows records those instead — the outbox holds exactly the rows of applies
that committed, keyed to the apply (its id is in the ack row). Writing the Delta
quarantine happens after COMMIT (``drain``), so a slow or failing object store never
holds MySQL locks; rows wait in the outbox until a drain succeeds.

A drain commits outbox rows to the quarantine under the app transaction
(``<sink id>:outbox``, N, N at least their highest id) and then deletes them from
the outbox by id: a crash between the two is repaired by the next drain, which finds
those rows' entry ids in the quarantine and only deletes them. The ids of one sink
rise in commit order, since its transactions serialise on its lease row; ids handed
out again (a TRUNCATE, a restore from backup) are told apart by the entry id too.
An entry's id in the quarantine is ``<apply id>/<outbox row id>``: unique, and
ordered as the apply set its rows aside.
"""

from __future__ import annotations

import logging

from sqlalchemy import Connection, Engine, Row, Table, delete, func, insert, select

from wal_sink.wal.quarantine import Entry, Quarantine, record_json

log = logging.getLogger(__name__)

DRAIN_ROWS = 10_000


class Outbox:
    def __init__(self, table: Table, sink_id: str, quarantine: Quarantine) -> None:
        self.table = table
        self.sink_id = sink_id
        self.quarantine = quarantine
        self.app_id = f"{sink_id}:outbox"  # ':' cannot occur in a sink id

    def put(
        self, conn: Connection, apply_id: str, batch_id: int, entries: list[Entry]
    ) -> None:
        """Add a batch's set-aside rows, inside the batch's transaction."""
        if entries:
            conn.execute(
                insert(self.table).values(recorded_at=func.now(6)),
                [
                    {
                        "sink_id": self.sink_id,
                        "apply_id": apply_id,
                        "batch_id": batch_id,
                        "reason": e.reason,
                        "record": record_json(e.record),
                    }
                    for e in entries
                ],
            )

    def waiting(self, conn: Connection) -> int:
        """Rows not yet in the quarantine table."""
        return conn.execute(
            select(func.count()).where(self.table.c.sink_id == self.sink_id)
        ).scalar_one()

    def applies(self, conn: Connection) -> set[tuple[str, int]]:
        """The applies (apply id, batch id) whose rows wait here."""
        c = self.table.c
        rows = conn.execute(
            select(c.apply_id, c.batch_id).where(c.sink_id == self.sink_id).distinct()
        )
        return {(a, b) for a, b in rows}

    def drain(self, engine: Engine) -> int:
        """Move waiting rows to the quarantine table; returns how many were moved.

        Rows are appended under the app transaction (``app_id``, N), N at least
        the highest row id appended, then deleted by id. A row whose id is not
        above the recorded N may be in the quarantine already — appended by a
        drain that died before deleting it — or be new under an id a TRUNCATE or
        a restore handed out again: the quarantine's entry ids (the apply id, a
        UUID, with the row id) tell which, so nothing is dropped unseen and nothing
        is appended twice."""
        c = self.table.c
        moved = 0
        while True:
            recorded = self.quarantine.version(self.app_id) or 0
            with engine.begin() as conn:
                rows = conn.execute(
                    select(
                        c.id, c.batch_id, c.apply_id, c.reason, c.record, c.recorded_at
                    )
                    .where(c.sink_id == self.sink_id)
                    .order_by(c.id)
                    .limit(DRAIN_ROWS)
                ).all()
            if not rows:
                return moved
            maybe = {_entry_id(r) for r in rows if r.id <= recorded}
            there = self.quarantine.holding(maybe) if maybe else set()
            fresh = [r for r in rows if _entry_id(r) not in there]
            if fresh:
                version = max(recorded + 1, fresh[-1].id)
                if not self.quarantine.append(
                    [self._entry(r) for r in fresh], self.app_id, version
                ):
                    continue  # another drain appended meanwhile: look again
                moved += len(fresh)
                log.warning(
                    "sink %s: %d row(s) set aside in %s",
                    self.sink_id,
                    len(fresh),
                    self.quarantine.path,
                )
            with engine.begin() as conn:
                conn.execute(
                    delete(self.table).where(
                        (c.sink_id == self.sink_id) & c.id.in_([r.id for r in rows])
                    )
                )

    def _entry(self, row: Row) -> dict[str, object]:
        return {
            "sink_id": self.sink_id,
            "batch_id": row.batch_id,
            "apply_id": row.apply_id,
            "reason": row.reason,
            "record": row.record,
            "recorded_at": row.recorded_at,
            "entry_id": _entry_id(row),
            "entry_seq": row.id,
        }


def _entry_id(row: Row) -> str:
    """An entry's id: its apply (a UUID) and its outbox row, unique whatever ids
    the outbox hands out again."""
    return f"{row.apply_id}/{row.id}"
