"""Step 3 of the protocol: apply staged batches to MySQL, each with its ack row, in
one transaction per group of consecutive batches.

The transaction, in order (docs/protocol.md):

1. Lock this sink's lease row and check the epoch (fencing, I6).
2. Read the group's ack rows with a locking read: a batch with an ack is applied
   already and is skipped (I2), whatever the WAL still holds of it (a purge may
   have removed its files) — unless this is a forced replay, which replaces the
   ack. The read waits for a transaction still committing those rows, so a retry
   after a lost COMMIT reply sees that commit's outcome: ack rows carrying one of
   this call's own earlier apply ids mean the earlier attempt committed.
3. For each batch to apply, in batch order (I8): find its files in the WAL, insert
   the ack row first (its primary key stops a second apply), apply the staged rows
   (batch_rows.py), put the rows set aside into the quarantine outbox, fill in the
   ack row's counts. A batch set aside whole (``wal-sink quarantine-batch``) puts
   all its rows into the outbox instead, under an ack row marked quarantined.
4. COMMIT. The group's rows and acks become visible together (I3), or not at all.

Transient errors (MySQL's and storage's) roll the transaction back and retry it
whole for the outage budget (retry.py). After COMMIT the outbox drains into the
quarantine table, outside the transaction.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass, field

from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError

from wal_sink import faults
from wal_sink.errors import FencedError, TerminalError, TransientError, first_line
from wal_sink.metrics import SinkMetrics
from wal_sink.mysql.acks import Ack, TableCounts
from wal_sink.mysql.errors import mysql_error
from wal_sink.mysql.lease import check as check_lease
from wal_sink.mysql.tables import APPLIED, QUARANTINED
from wal_sink.protocol.batch_rows import ChunkCallback
from wal_sink.protocol.chunk_path import AppliedRows
from wal_sink.protocol.parts import SinkParts
from wal_sink.protocol.retry import OutageBudget
from wal_sink.protocol.routed_rows import BatchRows
from wal_sink.protocol.set_aside_whole import put_whole_batch
from wal_sink.protocol.stop_signal import StopSignal
from wal_sink.protocol.target_ddl import WalSchemaDdl
from wal_sink.wal.model import BatchState, StagedBatch

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CommitResult:
    batch_id: int
    applied: bool
    """False when the batch already had an ack row and nothing was done."""
    rows: int = 0
    deleted: int = 0
    quarantined: int = 0
    seconds: float = 0.0
    """Time of the transaction that applied it (shared by its group)."""
    skipped: int = 0
    """CDC upserts a newer delete made stale: not applied, not quarantined."""
    table: str = ""
    """The target table, with one."""
    tables: dict[str, TableCounts] = field(default_factory=dict)
    """Per table, with several (``""``: rows whose route named none)."""

    def by_table(self) -> dict[str, TableCounts]:
        """What the batch did to each table."""
        if self.tables:
            return self.tables
        counts = TableCounts(self.rows, self.deleted, self.skipped, self.quarantined)
        return {self.table: counts}


@dataclass(frozen=True)
class _Outcome:
    """One batch of a group's transaction, before COMMIT."""

    batch_id: int
    ack: Ack | None
    """The ack row found: the batch was applied already (or by an earlier attempt
    of this call whose COMMIT reply was lost). None when this transaction applies
    it."""
    rows: int = 0
    deleted: int = 0
    quarantined: int = 0
    skipped: int = 0
    tables: dict[str, TableCounts] = field(default_factory=dict)


class Committer:
    """Applies staged batches of one sink, as the holder of lease ``epoch``."""

    def __init__(
        self,
        parts: SinkParts,
        engine: Engine,
        rows: BatchRows,
        epoch: int,
        stop: StopSignal | None = None,
        metrics: SinkMetrics | None = None,
    ) -> None:
        """``parts`` and ``rows`` (applying on ``engine``) as the sink instance
        assembled them; ``epoch`` is the lease this committer holds; ``stop``, the
        instance's: asked to stop now, it gives up waiting out an outage."""
        self.config = parts.config
        self.metrics = metrics or SinkMetrics(parts.config.sink.id)
        self.engine = engine
        self.wal = parts.wal
        self.epoch = epoch
        self.stop = stop
        self.lease = parts.tables.lease
        self.acks = parts.acks
        self.retries = parts.retries
        self.outbox = parts.outbox
        self._outbox_filled = True
        """Rows may wait in the outbox: put there by an apply, left by a failed
        drain, or by an earlier process (hence True at first)."""
        self.rows = rows
        self.ddl = WalSchemaDdl(engine, parts.config, parts.wal)
        """Tables created and evolved for the WAL's schema (mysql.auto_*)."""
        mysql = parts.config.mysql
        self.table = "" if mysql.route_column else mysql.target.table
        """The target table with one (results and metrics name it); with several
        a result without per-table counts (a batch set aside whole, or found
        committed after a lost reply) counts under ``""``."""

    @property
    def sink_id(self) -> str:
        return self.config.sink.id

    def apply(
        self,
        batch_id: int,
        *,
        batch: StagedBatch | None = None,
        force: bool = False,
        on_chunk: ChunkCallback | None = None,
    ) -> CommitResult:
        """Apply staged batch ``batch_id`` exactly once (see ``apply_group``)."""
        return self.apply_group(
            [batch if batch is not None else batch_id], force=force, on_chunk=on_chunk
        )[0]

    def set_aside(self, batch_id: int) -> CommitResult:
        """Set staged batch ``batch_id`` aside whole, exactly once: every row into the
        quarantine table (through the outbox), its ack row marked quarantined,
        nothing applied (``wal-sink quarantine-batch``; the caller keeps batch
        order). ``applied`` is False when the batch had an ack already."""
        return self.apply_group([batch_id], set_aside=True)[0]

    def apply_group(
        self,
        batches: list[StagedBatch | int],
        *,
        force: bool = False,
        on_chunk: ChunkCallback | None = None,
        set_aside: bool = False,
    ) -> list[CommitResult]:
        """Apply consecutive staged batches in one transaction, in batch order.

        Args:
            batches: each as staging committed it, or its id to look up in the WAL.
            force: re-apply batches that are acked (operator replay): the old ack
                row is replaced in the same transaction, so ``add`` columns add
                again — once, even when a COMMIT reply is lost.
            on_chunk: progress callback, called inside the open transaction.
            set_aside: put the batches' rows into the quarantine instead of the
                target, and ack them as quarantined.

        Raises:
            FencedError: a newer instance holds the lease.
            TransientError: still failing when the outage budget is spent.
            TerminalError: a batch cannot be applied as configured, or the WAL
                says it was staged but its files are gone.
        """
        ids = [b.batch_id if isinstance(b, StagedBatch) else b for b in batches]
        if ids != list(range(ids[0], ids[0] + len(ids))):
            raise ValueError(f"a group is consecutive batches in order, not {ids}")
        what = f"batch {ids[0]}" + (f"..{ids[-1]}" if len(ids) > 1 else "")
        budget = OutageBudget(
            self.config.mysql,
            f"the transaction of {what}",
            self.stop,
            self.metrics.retries.inc,
        )
        tried: set[str] = set()
        while True:
            apply_id = uuid.uuid4().hex
            try:
                if self.ddl.ensure():  # before the transaction: DDL commits
                    self.rows.refresh()
                results = self._transaction(
                    batches, apply_id, tried, force, on_chunk, set_aside
                )
                break
            except FencedError:
                self.metrics.lease_held.set(0)
                raise
            except TransientError as e:
                tried.add(apply_id)
                budget.wait(e)
        self.drain_outbox()
        return results

    def _resolve(self, batch: StagedBatch | int) -> StagedBatch:
        """The batch with its files; an empty one if it was staged with no rows.
        Called for batches without an ack only: an acked batch's files may be
        purged."""
        if isinstance(batch, StagedBatch):
            return batch
        self.wal.refresh()
        found = self.wal.staged_batch(batch)
        if found is not None:
            return found
        state = self.wal.state_without_files(batch, self.sink_id)
        if state is BatchState.EMPTY:
            return StagedBatch(batch, ())
        if state is BatchState.NOT_STAGED:
            raise TerminalError(
                f"the WAL at {self.wal.path} never staged this batch",
                sink_id=self.sink_id,
                batch_id=batch,
            )
        raise TerminalError(
            f"the WAL at {self.wal.path} records this batch as staged, but its files "
            "are no longer in the table; it is not applied (restore the WAL, or "
            "ack it by hand once its rows are accounted for)",
            sink_id=self.sink_id,
            batch_id=batch,
        )

    def _transaction(
        self,
        batches: list[StagedBatch | int],
        apply_id: str,
        tried: set[str],
        force: bool,
        on_chunk: ChunkCallback | None,
        set_aside: bool,
    ) -> list[CommitResult]:
        ids = [b.batch_id if isinstance(b, StagedBatch) else b for b in batches]
        first, last = ids[0], ids[-1]
        started = time.monotonic()
        results: list[_Outcome] = []
        self.rows.table_at = None
        try:
            with self.engine.connect() as conn, conn.begin():
                # Step 1. Fencing.
                check_lease(
                    conn,
                    self.lease,
                    self.sink_id,
                    self.epoch,
                    lock=True,
                    batch_id=first,
                )
                # Step 2. Which batches are applied already: a locking read.
                acked = self.acks.locked(conn, first, last)
                for batch_id, wanted in zip(ids, batches):
                    ack = acked.get(batch_id)
                    if ack is not None and (ack.apply_id in tried or not force):
                        results.append(_Outcome(batch_id, ack))
                        continue
                    if ack is not None:
                        self.acks.remove(conn, batch_id)
                        if ack.apply_id is not None:  # its set-aside rows: done now
                            self.retries.supersede(
                                conn, batch_id, ack.apply_id, apply_id
                            )
                    # Step 3. Its files, the ack row first, the rows, the counts.
                    batch = self._resolve(wanted)
                    state = QUARANTINED if set_aside else APPLIED
                    if not self.acks.insert(
                        conn, batch_id, self.epoch, apply_id, state
                    ):
                        raise TransientError(
                            "an ack row appeared under the lock; retrying",
                            sink_id=self.sink_id,
                            batch_id=batch.batch_id,
                        )
                    if set_aside:
                        applied = AppliedRows()
                        put = put_whole_batch(
                            conn,
                            self.outbox,
                            self.wal.read_batch(batch, self.config.wal.chunk_rows),
                            batch.batch_id,
                            apply_id,
                        )
                    else:
                        applied = self.rows.apply(conn, batch, on_chunk)
                        self.outbox.put(conn, apply_id, batch_id, applied.set_aside)
                        put = len(applied.set_aside)
                    self._outbox_filled |= bool(put)
                    rows, deleted = applied.upserted, applied.deleted
                    skipped = applied.skipped
                    self.acks.complete(
                        conn, batch_id, rows, deleted, put, skipped, applied.tables
                    )
                    results.append(
                        _Outcome(
                            batch_id, None, rows, deleted, put, skipped, applied.tables
                        )
                    )
                    faults.hit("commit.before_commit", batch_id)
                # Step 4. COMMIT (leaving the block).
            faults.hit("commit.after_commit", last)
        except DBAPIError as e:
            raise mysql_error(
                e, sink_id=self.sink_id, batch_id=first, table=self.rows.table_at
            ) from e
        seconds = time.monotonic() - started
        self.metrics.commit_seconds.observe(seconds)
        return [self._result(r, tried, seconds) for r in results]

    def _result(
        self, outcome: _Outcome, tried: set[str], seconds: float
    ) -> CommitResult:
        batch_id, ack = outcome.batch_id, outcome.ack
        if ack is None:
            log.debug(
                "sink %s batch %s applied: %s rows, %s deleted, %s quarantined",
                self.sink_id,
                batch_id,
                outcome.rows,
                outcome.deleted,
                outcome.quarantined,
            )
            return CommitResult(
                batch_id,
                True,
                outcome.rows,
                outcome.deleted,
                outcome.quarantined,
                seconds,
                outcome.skipped,
                self.table,
                outcome.tables,
            )
        if ack.apply_id in tried:  # an earlier attempt committed; its reply was lost
            return CommitResult(
                batch_id,
                True,
                ack.rows,
                ack.deleted,
                ack.quarantined,
                seconds,
                ack.skipped,
                self.table,
            )
        log.info("sink %s batch %s already applied; skipped", self.sink_id, batch_id)
        return CommitResult(batch_id, applied=False)

    def drain_outbox(self) -> None:
        """Move set-aside rows to the quarantine table, if any may wait (not every
        batch: a drain reads the quarantine table); on failure they wait in the
        outbox for the next drain (nothing is lost, the batch stays applied).
        Recovery calls it too, so rows an earlier process left there (a crash right
        after COMMIT) are listed and retried without waiting for a new batch."""
        if not self._outbox_filled:
            return
        try:
            self.outbox.drain(self.engine)
            self._outbox_filled = False
        except Exception as e:
            log.warning(
                "sink %s: rows set aside stay in the outbox table %s for now: %s",
                self.sink_id,
                self.outbox.table.name,
                first_line(e),
            )
