"""The retry table's SQL, in one place: one row per quarantine entry that
``wal-sink quarantine retry`` touched — ``retried`` (applied, exactly once) or
``failed`` (tried, refused again; still open, with the new reason).

A row is written in the same transaction as the entry's effect on the target, so
"applied" and "recorded as retried" are one fact, as a batch and its ack row are.
Deciding that an entry is retried already is done only by a locking read inside
that transaction, never by a plain SELECT (which is for listing and planning).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, Table, delete, func, select
from sqlalchemy.dialects.mysql import insert
from sqlalchemy.exc import DBAPIError

from wal_sink.mysql.errors import error_code

RETRIED = "retried"
FAILED = "failed"
SUPERSEDED = "superseded"
"""The state of a marker row (``marker``): every entry one apply set aside from one
batch is superseded (the batch was applied again since, by ``replay --force``)."""
IN_LIST = 1000
"""Entry ids per IN list."""
NO_SUCH_TABLE = 1146


def marker(apply_id: str, batch_id: int) -> str:
    """The marker row's entry id for ``batch_id``'s entries set aside by apply
    ``apply_id``: per batch, as one apply may have applied several batches and a
    replay supersedes only its own."""
    return f"{apply_id}/{batch_id}/*"


@dataclass(frozen=True)
class RetryState:
    state: str
    """RETRIED or FAILED."""
    retry_id: str
    """The retry transaction that wrote it."""
    reason: str | None
    """Why it failed again (FAILED only)."""
    at: datetime


@dataclass(frozen=True)
class RetryCounts:
    retried: int
    failed: int


class RetryStates:
    """The retry rows of one sink."""

    def __init__(self, table: Table, sink_id: str) -> None:
        self.table = table
        self.sink_id = sink_id
        self._mine = table.c.sink_id == sink_id

    def locked(
        self, conn: Connection, entry_ids: Iterable[str]
    ) -> dict[str, RetryState]:
        """The rows of ``entry_ids``, read with locks: waits for a retry still
        committing them, so its outcome is what is seen."""
        return self._read(conn, entry_ids, lock=True)

    def of(self, conn: Connection, entry_ids: Iterable[str]) -> dict[str, RetryState]:
        """The rows of ``entry_ids`` (a plain read: for listing and planning)."""
        return self._read(conn, entry_ids, lock=False)

    def _read(
        self, conn: Connection, entry_ids: Iterable[str], lock: bool
    ) -> dict[str, RetryState]:
        c = self.table.c
        found: dict[str, RetryState] = {}
        if not lock and not self.exists(conn):
            return found  # an install of 0.3 not upgraded yet: nothing retried
        for ids in _pieces(entry_ids):
            query = select(
                c.entry_id, c.state, c.retry_id, c.reason, c.retried_at
            ).where(self._mine & c.entry_id.in_(ids))
            if lock:
                query = query.with_for_update()
            for row in conn.execute(query):
                found[row[0]] = RetryState(*row[1:])
        return found

    def record(
        self,
        conn: Connection,
        batch_id: int,
        retry_id: str,
        retried: Iterable[str],
        failed: dict[str, str],
    ) -> None:
        """Mark entries of ``batch_id`` retried, and others failed with their new
        reason, replacing what an earlier retry recorded of them."""
        rows = [{"entry_id": e, "state": RETRIED, "reason": None} for e in retried] + [
            {"entry_id": e, "state": FAILED, "reason": r} for e, r in failed.items()
        ]
        if not rows:
            return
        stmt = insert(self.table).values(
            sink_id=self.sink_id,
            batch_id=batch_id,
            retry_id=retry_id,
            retried_at=func.now(6),
        )
        stmt = stmt.on_duplicate_key_update(
            state=stmt.inserted.state,
            reason=stmt.inserted.reason,
            retry_id=stmt.inserted.retry_id,
            retried_at=stmt.inserted.retried_at,
        )
        conn.execute(stmt, rows)

    def supersede(
        self, conn: Connection, batch_id: int, apply_id: str, by: str
    ) -> None:
        """Mark the entries apply ``apply_id`` of ``batch_id`` set aside as
        superseded by apply ``by`` (a forced replay), in that apply's transaction:
        a marker row that outlives the ack row naming ``by``, which ``purge``
        removes."""
        stmt = insert(self.table).values(
            sink_id=self.sink_id,
            entry_id=marker(apply_id, batch_id),
            batch_id=batch_id,
            state=SUPERSEDED,
            retry_id=by,
            reason=None,
            retried_at=func.now(6),
        )
        conn.execute(stmt.on_duplicate_key_update(state=stmt.inserted.state))

    def superseded(
        self,
        conn: Connection,
        applies: Iterable[tuple[str, int]],
        *,
        lock: bool = False,
    ) -> set[tuple[str, int]]:
        """Which of ``applies`` (apply id, batch id) a forced replay superseded (with
        ``lock``, a locking read: it waits for a replay still committing)."""
        wanted = {marker(a, b): (a, b) for a, b in applies}
        found = self._read(conn, wanted, lock=lock)
        return {wanted[i] for i, s in found.items() if s.state == SUPERSEDED}

    def exists(self, conn: Connection) -> bool:
        """Whether the table exists (an install of 0.3 not upgraded yet has none)."""
        try:
            conn.execute(select(self.table.c.entry_id).limit(0)).all()
        except DBAPIError as e:
            if error_code(e) != NO_SUCH_TABLE:
                raise
            return False
        return True

    def counts(self, conn: Connection) -> RetryCounts:
        """Entries retried and failed again; none while the table does not exist."""
        c = self.table.c
        rows = (
            conn.execute(
                select(c.state, func.count()).where(self._mine).group_by(c.state)
            ).all()
            if self.exists(conn)
            else []
        )
        by_state = dict(rows)
        return RetryCounts(by_state.get(RETRIED, 0), by_state.get(FAILED, 0))

    def all_ids(self, conn: Connection) -> set[str]:
        """Entry ids of the rows, markers (``marker``) included."""
        if not self.exists(conn):
            return set()
        c = self.table.c
        return set(conn.execute(select(c.entry_id).where(self._mine)).scalars())

    def forget(self, conn: Connection, entry_ids: Iterable[str]) -> int:
        """Drop the rows of entries removed from the quarantine; returns how many."""
        dropped = 0
        for ids in _pieces(entry_ids):
            dropped += conn.execute(
                delete(self.table).where(self._mine & self.table.c.entry_id.in_(ids))
            ).rowcount
        return dropped


def _pieces(entry_ids: Iterable[str]) -> Iterator[list[str]]:
    ids = list(entry_ids)
    for start in range(0, len(ids), IN_LIST):
        yield ids[start : start + IN_LIST]
