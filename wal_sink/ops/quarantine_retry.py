"""``wal-sink quarantine retry``: quarantined rows applied after all, exactly once,
once the operator fixed what refused them (a column widened, a parent row added).

Entries are retried batch by batch, in batch order, then in the order they were set
aside; each batch's entries in ONE MySQL transaction, as the committer applies a
batch (committer.py):

1. Lock the sink's lease row: retries and the sink's own committer take turns.
2. Read the entries' retry rows with a locking read: an entry retried already — by
   another retry running at the same time, by an earlier one, or by this one before
   a lost COMMIT reply — is skipped, and so is one whose batch a forced replay
   applied again since the plan (superseded). It waits for a retry or a replay
   still committing them.
3. Apply the rest through the committer's own row path (merge policies, the version
   guard, CDC deletes and tombstones, the guard against reaching another row), all
   at once under a savepoint; when any is refused again, that is rolled back and the
   entries are bisected, each half under a savepoint of its own, so that exactly
   the refused ones stay out.
4. Record each entry ``retried`` or ``failed`` (with its new reason) in the retry
   table, and COMMIT: an entry's effect and its retry row are one fact, so ``add``
   columns add once whatever crashes.

A retry does not take the lease: it fences no running job, as its exactly-once rests
on its own retry rows, not on the epoch, and the lease lock makes its transactions
and the job's take turns. Retried rows arrive after later batches: with a version
column, an older retried row leaves newer data alone and a tombstone keeps a deleted
key deleted; without one the retried row is simply the latest write.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError

from wal_sink import faults
from wal_sink.errors import TransientError
from wal_sink.mysql.errors import mysql_error
from wal_sink.mysql.lease import current_epoch
from wal_sink.mysql.preflight import preflight
from wal_sink.mysql.retry_state import FAILED, RETRIED, RetryState
from wal_sink.mysql.tables import init_db
from wal_sink.mysql.target import reflect_target
from wal_sink.mysql.tombstones import ensure_side_tables
from wal_sink.ops.quarantine_entries import ROW, list_entries
from wal_sink.protocol.retry import OutageBudget
from wal_sink.protocol.sink_instance import SinkInstance
from wal_sink.wal.quarantine import StoredEntry
from wal_sink.wal.quarantine_records import (
    RecordTypeError,
    TypedRow,
    chunks,
    typed_row,
    wal_columns,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RetryPlan:
    batches: tuple[tuple[int, tuple[StoredEntry, ...]], ...]
    """Open rows to retry, by batch, in batch order."""
    not_retried: dict[str, int] = field(default_factory=dict)
    """Open entries selected that are not rows a retry can apply, by kind."""
    retried_before: int = 0
    """Entries selected that a retry applied already."""

    @property
    def entries(self) -> int:
        return sum(len(entries) for _, entries in self.batches)


@dataclass(frozen=True)
class BatchRetry:
    batch_id: int
    applied: int
    """Entries this retry applied (those a newer delete made stale included)."""
    failed: dict[str, str]
    """Entries refused again, with the new reason: still open."""
    retried_meanwhile: int
    """Entries another retry applied, or a forced replay superseded, since the
    plan: skipped."""
    stale: int = 0
    """CDC upserts a newer delete made stale: nothing to apply, resolved."""


def plan_retry(
    sink: SinkInstance,
    *,
    batch_id: int | None = None,
    reason: str | None = None,
    table: str | None = None,
) -> RetryPlan:
    """Select the open entries (of one batch, whose reason holds ``reason``, of
    one ``table``)."""
    listed = list_entries(sink, batch_id=batch_id, reason=reason, table=table)
    by_batch: dict[int, list[StoredEntry]] = {}
    not_retried: dict[str, int] = {}
    for e in listed:
        if not e.is_open:
            continue
        if e.kind == ROW:
            by_batch.setdefault(e.entry.batch_id, []).append(e.entry)
        else:
            not_retried[e.kind] = not_retried.get(e.kind, 0) + 1
    return RetryPlan(
        batches=tuple((b, tuple(entries)) for b, entries in sorted(by_batch.items())),
        not_retried=not_retried,
        retried_before=sum(not e.is_open for e in listed),
    )


class QuarantineRetry:
    """Retries quarantine entries of one sink, batch by batch."""

    def __init__(self, sink: SinkInstance) -> None:
        self.sink = sink
        self.config = sink.config
        self.rows = sink.batch_rows()
        self.columns = wal_columns(sink.wal)

    def prepare(self) -> None:
        """The target's checks (as at the job's start) and the sink's tables,
        tombstone tables included (their DDL is never run in a retry's
        transaction)."""
        engine = self.sink.engine
        try:
            for target in self.config.mysql.targets:
                table = reflect_target(engine, target.table)
                preflight(engine, self.config, target, table)
            init_db(engine, self.config.mysql)
            ensure_side_tables(engine, self.config, self.config.mysql.targets)
        except DBAPIError as e:
            raise mysql_error(e, sink_id=self.sink.sink_id) from e

    def retry(self, batch_id: int, entries: tuple[StoredEntry, ...]) -> BatchRetry:
        """Retry ``entries`` of ``batch_id`` in one transaction, retried whole on
        transient errors for the outage budget."""
        budget = OutageBudget(
            self.config.mysql, f"the retry of batch {batch_id}'s quarantine entries"
        )
        tried: set[str] = set()
        while True:
            retry_id = uuid.uuid4().hex
            try:
                return self._transaction(batch_id, entries, retry_id, tried)
            except TransientError as e:
                tried.add(retry_id)
                budget.wait(e)

    def _transaction(
        self,
        batch_id: int,
        entries: tuple[StoredEntry, ...],
        retry_id: str,
        tried: set[str],
    ) -> BatchRetry:
        sink = self.sink
        try:
            with sink.engine.connect() as conn, conn.begin():
                # Step 1. Take turns with the sink's committer and other retries.
                current_epoch(conn, sink.tables.lease, sink.sink_id, lock=True)
                # Step 2. Which entries are retried already, or superseded by a
                # forced replay: a locking read.
                found = sink.retries.locked(conn, [e.entry_id for e in entries])
                if any(s.retry_id in tried for s in found.values()):
                    return _committed_before(batch_id, entries, found, tried)
                superseded = sink.retries.superseded(
                    conn,
                    ((e.apply_id, e.batch_id) for e in entries if e.apply_id),
                    lock=True,
                )
                todo = [
                    e
                    for e in entries
                    if _open(found.get(e.entry_id))
                    and (e.apply_id, e.batch_id) not in superseded
                ]
                # Step 3. Apply them, keeping out those refused again.
                applied, failed, stale = self._apply(conn, todo)
                # Step 4. Their retry rows; COMMIT (leaving the block).
                sink.retries.record(conn, batch_id, retry_id, applied, failed)
                faults.hit("retry.before_commit", batch_id)
            faults.hit("retry.after_commit", batch_id)
        except DBAPIError as e:
            raise mysql_error(
                e,
                sink_id=sink.sink_id,
                batch_id=batch_id,
            ) from e
        return BatchRetry(
            batch_id, len(applied), failed, len(entries) - len(todo), stale
        )

    def _apply(
        self, conn: Connection, entries: list[StoredEntry]
    ) -> tuple[list[str], dict[str, str], int]:
        """Apply ``entries``; returns those applied, those refused again with their
        reason, and how many were stale."""
        failed: dict[str, str] = {}
        typed = []
        for e in entries:
            try:
                typed.append((e, typed_row(json.loads(e.record), self.columns)))
            except RecordTypeError as err:
                failed[e.entry_id] = f"its record cannot be read back: {err}"
        applied, stale = self._isolating(conn, typed, failed)
        return applied, failed, stale

    def _isolating(
        self,
        conn: Connection,
        typed: list[tuple[StoredEntry, TypedRow]],
        failed: dict[str, str],
    ) -> tuple[list[str], int]:
        """Apply ``typed`` in order under a savepoint; when any is refused again,
        roll back and bisect, so that exactly the refused ones (added to ``failed``)
        stay out. Returns the entries applied and how many were stale."""
        if not typed:
            return [], 0
        savepoint = conn.begin_nested()
        applied = self.rows.apply_chunks(
            conn,
            chunks((row for _, row in typed), self.config.wal.chunk_rows),
            len(typed),
            stream=list(self.columns),
        )
        if not applied.set_aside:
            savepoint.commit()
            return [e.entry_id for e, _ in typed], applied.skipped
        savepoint.rollback()
        if len(typed) == 1:
            failed[typed[0][0].entry_id] = applied.set_aside[0].reason
            return [], 0
        middle = len(typed) // 2
        first, first_stale = self._isolating(conn, typed[:middle], failed)
        second, second_stale = self._isolating(conn, typed[middle:], failed)
        return first + second, first_stale + second_stale


def run_retry(
    sink: SinkInstance,
    plan: RetryPlan,
    on_batch: Callable[[BatchRetry], None] | None = None,
) -> list[BatchRetry]:
    """Retry the plan's batches in batch order, one transaction each."""
    retry = QuarantineRetry(sink)
    retry.prepare()
    results = []
    for batch_id, entries in plan.batches:
        result = retry.retry(batch_id, entries)
        log.info(
            "sink %s batch %s: %d quarantine entries retried, %d failed again",
            sink.sink_id,
            batch_id,
            result.applied,
            len(result.failed),
        )
        results.append(result)
        if on_batch is not None:
            on_batch(result)
    return results


def _open(state: RetryState | None) -> bool:
    return state is None or state.state == FAILED


def _committed_before(
    batch_id: int,
    entries: tuple[StoredEntry, ...],
    found: dict[str, RetryState],
    tried: set[str],
) -> BatchRetry:
    """An earlier attempt of this retry committed (its COMMIT reply was lost): its
    retry rows say what it did."""
    mine = {i: s for i, s in found.items() if s.retry_id in tried}
    return BatchRetry(
        batch_id,
        applied=sum(s.state == RETRIED for s in mine.values()),
        failed={i: s.reason or "" for i, s in mine.items() if s.state == FAILED},
        retried_meanwhile=len(entries) - len(mine),
    )
