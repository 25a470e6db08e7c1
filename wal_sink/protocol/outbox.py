"""Rows a batch sets aside travel to the quarantine table through an outbox in MySQL.

The committer inserts them into the outbox inside the batch's own transaction, next
to its ack row: if the transaction rolls back, so do they, and a retry that sets
aside other rows records those instead — the outbox holds exactly the rows of applies
that committed, keyed to the apply (its id is in the ack row). Writing the Delta
quarantine happens after COMMIT (``drain``), so a slow or failing object store never
holds MySQL locks; rows wait in the outbox until a drain succeeds.

A drain commits outbox rows up to id N to the quarantine under the app transaction
(``<sink id>:outbox``, N) and then deletes them from the outbox: a crash between the
two is repaired by the next drain, which sees N recorded and only deletes. The ids of
one sink rise in commit order, since its transactions serialise on its lease row.
An entry's id in the quarantine is ``<apply id>/<outbox row id>``: unique, and
ordered as the apply set its rows aside.
"""

from __future__ import annotations

import logging

from sqlalchemy import Connection, Engine, Table, delete, func, insert, select

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

    def drain(self, engine: Engine) -> int:
        """Move waiting rows to the quarantine table; returns how many were moved."""
        c = self.table.c
        moved = 0
        while True:
            recorded = self.quarantine.version(self.app_id) or 0
            with engine.begin() as conn:
                conn.execute(
                    delete(self.table).where(
                        (c.sink_id == self.sink_id) & (c.id <= recorded)
                    )
                )
                rows = conn.execute(
                    select(
                        c.id, c.batch_id, c.apply_id, c.reason, c.record, c.recorded_at
                    )
                    .where((c.sink_id == self.sink_id) & (c.id > recorded))
                    .order_by(c.id)
                    .limit(DRAIN_ROWS)
                ).all()
            if not rows:
                return moved
            entries = [
                {
                    "sink_id": self.sink_id,
                    "batch_id": r.batch_id,
                    "apply_id": r.apply_id,
                    "reason": r.reason,
                    "record": r.record,
                    "recorded_at": r.recorded_at,
                    "entry_id": f"{r.apply_id}/{r.id}",
                    "entry_seq": r.id,
                }
                for r in rows
            ]
            if self.quarantine.append(entries, self.app_id, rows[-1].id):
                moved += len(rows)
                log.warning(
                    "sink %s: %d row(s) set aside in %s",
                    self.sink_id,
                    len(rows),
                    self.quarantine.path,
                )
