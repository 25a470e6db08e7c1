"""Step 2 of the protocol: apply one staged batch to MySQL in one transaction.

The transaction, in order (DESIGN.md §2):

1. Lock this sink's lease row and check the epoch (fencing, I6).
2. Insert the ack row (sink id, batch id). Its primary key makes a second apply fail
   fast with a duplicate key: the batch is already applied, roll back and skip (I2).
3. Apply the staged rows, read back from the WAL in bounded chunks, in staged order:
   upserts by merge policy, CDC deletes by key. A chunk goes as multi-row INSERTs
   rendered in Arrow (or through LOAD DATA with ``mysql.local_infile``); one that
   cannot be rendered exactly, or that MySQL rejects, goes value by value through the
   driver. Rows with a null key, NaN or infinity, or values MySQL rejects (isolated
   under savepoints) go to the quarantine table instead.
4. Fill in the ack row's counts.
5. COMMIT. Rows and ack become visible together (I3), or not at all.

"Already applied" is decided only by the unique insert, never by a snapshot SELECT.
"""

from __future__ import annotations

import itertools
import logging
import math
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from sqlalchemy import (
    Connection,
    Engine,
    Executable,
    MetaData,
    Table,
    delete,
    func,
    select,
    text,
    update,
)
from sqlalchemy.exc import DBAPIError, IntegrityError, NoSuchTableError

from wal_sink import faults
from wal_sink.bulk_load import BulkLoader, BulkLoadRefused, BulkLoadWarned
from wal_sink.config import Config
from wal_sink.errors import TerminalError, TransientError
from wal_sink.lease import check as check_lease
from wal_sink.multi_row import MultiRowUpsert
from wal_sink.mysql_errors import (
    DUPLICATE_KEY,
    error_code,
    first_line,
    is_row_error,
    is_transient,
)
from wal_sink.quarantine import Entry, Quarantine
from wal_sink.schema import sink_tables
from wal_sink.upsert import build_delete, build_upsert
from wal_sink.wal import StagedBatch, WalReader

log = logging.getLogger(__name__)

ChunkCallback = Callable[[int, int], None]
"""Called after each applied chunk with (rows so far, rows in the batch)."""


@dataclass(frozen=True)
class CommitResult:
    batch_id: int
    applied: bool
    """False when the batch already had an ack row and nothing was done."""
    rows: int = 0
    deleted: int = 0
    quarantined: int = 0
    seconds: float = 0.0


class Committer:
    """Applies staged batches of one sink, as the holder of lease ``epoch``."""

    def __init__(
        self, config: Config, engine: Engine, wal: WalReader, epoch: int
    ) -> None:
        self.config = config
        self.engine = engine
        self.wal = wal
        self.epoch = epoch
        self.ack, self.lease = sink_tables(config.mysql)
        self.quarantine = Quarantine(
            config.quarantine_path, config.sink.id, storage=config.storage
        )
        self._target: Table | None = None
        self._bulk_load_allowed = True

    @property
    def sink_id(self) -> str:
        return self.config.sink.id

    def target(self) -> Table:
        """The reflected target table; refuses tables that are not InnoDB."""
        if self._target is None:
            self._target = reflect_target(self.engine, self.config.mysql.table)
        return self._target

    def apply(
        self,
        batch_id: int,
        *,
        batch: StagedBatch | None = None,
        force: bool = False,
        on_chunk: ChunkCallback | None = None,
    ) -> CommitResult:
        """Apply staged batch ``batch_id`` exactly once, retrying transient errors.

        The whole transaction is retried — never single statements — with capped
        exponential backoff and jitter. When the reply to COMMIT was lost the outcome
        is unknown; the retry's ack insert finds the row if COMMIT had succeeded, and
        the batch is then reported as already applied.

        Args:
            batch: the batch as staging committed it (saves reading the WAL's file
                list); by default it is looked up in the WAL.
            force: re-apply even if acked (operator replay): the old ack row is
                replaced in the same transaction, so ``add`` columns add again.
                A retry first checks whether the ack row was already replaced (a
                COMMIT whose reply was lost), so a forced batch is added once.
            on_chunk: progress callback, called inside the open transaction.

        Raises:
            FencedError: a newer instance holds the lease.
            TransientError: still failing after ``mysql.retry_attempts`` retries.
            TerminalError: the batch cannot be applied as configured.
        """
        mysql = self.config.mysql
        before = self._ack_values(batch_id) if force else None
        for attempt in itertools.count(1):
            try:
                if force and attempt > 1:
                    now = self._ack_values(batch_id)
                    if now is not None and now != before:
                        return CommitResult(batch_id, True, now[0], now[1], now[2])
                return self._apply_once(
                    batch_id, batch=batch, force=force, on_chunk=on_chunk
                )
            except TransientError as e:
                if attempt > mysql.retry_attempts:
                    raise
                wait = min(
                    mysql.retry_backoff_max, mysql.retry_backoff * 2 ** (attempt - 1)
                )
                wait *= random.uniform(0.5, 1.0)
                log.warning(
                    "%s; retry %d/%d of the batch transaction in %.1fs",
                    e,
                    attempt,
                    mysql.retry_attempts,
                    wait,
                )
                time.sleep(wait)
        raise AssertionError("unreachable")

    def _ack_values(self, batch_id: int) -> tuple[int, int, int, Any] | None:
        """(row_count, deleted_count, quarantined, committed_at) of the ack, if any."""
        a = self.ack.c
        try:
            with self.engine.connect() as conn:
                row = conn.execute(
                    select(
                        a.row_count, a.deleted_count, a.quarantined, a.committed_at
                    ).where(self._ack_row(batch_id))
                ).first()
        except DBAPIError as e:
            raise self._wrap(e, batch_id) from e
        return tuple(row) if row else None

    def _apply_once(
        self,
        batch_id: int,
        *,
        batch: StagedBatch | None,
        force: bool,
        on_chunk: ChunkCallback | None,
    ) -> CommitResult:
        started = time.monotonic()
        if batch is None:
            self.wal.refresh()
            batch = self.wal.staged_batch(batch_id)
        try:
            target = self.target()
            with self.engine.connect() as conn, conn.begin() as tx:
                # Step 1. Fencing.
                check_lease(
                    conn,
                    self.lease,
                    self.sink_id,
                    self.epoch,
                    lock=True,
                    batch_id=batch_id,
                )
                # Step 2. The ack row first: its primary key stops a second apply.
                if force:
                    conn.execute(delete(self.ack).where(self._ack_row(batch_id)))
                if not self._insert_ack(conn, batch_id):
                    tx.rollback()
                    log.info(
                        "sink %s batch %s already applied; skipped",
                        self.sink_id,
                        batch_id,
                    )
                    return CommitResult(batch_id, applied=False)
                # Step 3. The staged rows, in bounded chunks and staged order; rows
                # with a null key or values MySQL rejects are set aside.
                rows, deleted, bad = self._apply_rows(conn, target, batch, on_chunk)
                self.quarantine.record(batch_id, bad)
                # Step 4. Complete the ack row.
                conn.execute(
                    update(self.ack)
                    .where(self._ack_row(batch_id))
                    .values(
                        row_count=rows,
                        deleted_count=deleted,
                        quarantined=len(bad),
                        committed_at=func.now(6),
                    )
                )
                faults.hit("commit.before_commit", batch_id)
                # Step 5. COMMIT (leaving the block).
            faults.hit("commit.after_commit", batch_id)
        except DBAPIError as e:
            raise self._wrap(e, batch_id) from e
        result = CommitResult(
            batch_id, True, rows, deleted, len(bad), time.monotonic() - started
        )
        log.info(
            "sink %s batch %s applied: %s rows, %s deleted, %s quarantined in %.3fs",
            self.sink_id,
            batch_id,
            rows,
            deleted,
            len(bad),
            result.seconds,
        )
        if bad:
            log.warning(
                "sink %s batch %s: %d row(s) quarantined in %s, first: %s",
                self.sink_id,
                batch_id,
                len(bad),
                self.quarantine.path,
                bad[0].reason,
            )
        return result

    # --- steps ----------------------------------------------------------------

    def _ack_row(self, batch_id: int):
        return (self.ack.c.sink_id == self.sink_id) & (self.ack.c.batch_id == batch_id)

    def _insert_ack(self, conn: Connection, batch_id: int) -> bool:
        # A failed statement does not end a MySQL transaction; the caller rolls back.
        try:
            conn.execute(
                self.ack.insert().values(
                    sink_id=self.sink_id,
                    batch_id=batch_id,
                    row_count=0,
                    deleted_count=0,
                    quarantined=0,
                    epoch=self.epoch,
                    committed_at=func.now(6),
                )
            )
        except IntegrityError as e:
            if error_code(e) == DUPLICATE_KEY:
                return False
            raise
        return True

    def _apply_rows(
        self,
        conn: Connection,
        target: Table,
        batch: StagedBatch | None,
        on_chunk: ChunkCallback | None,
    ) -> tuple[int, int, list[Entry]]:
        """Apply the batch in staged order; return (upserted, deleted, set aside)."""
        if batch is None:
            return 0, 0, []
        mysql, cdc = self.config.mysql, self.config.cdc
        upsert = loader = multi = None
        remove = build_delete(target, mysql) if cdc else None
        rows = deleted = done = 0
        bad: list[Entry] = []
        for chunk in self.wal.read_batch(batch, self.config.wal.chunk_rows):
            if upsert is None:
                columns = [
                    c for c in chunk.schema.names if not cdc or c != cdc.op_column
                ]
                upsert = build_upsert(target, columns, mysql)
                if not cdc:
                    multi = MultiRowUpsert.for_schema(
                        conn, upsert, columns, chunk.schema
                    )
                    if mysql.local_infile and BulkLoader.supports(conn, chunk.schema):
                        loader = BulkLoader(target, columns, mysql, self.sink_id)
            applied = None if cdc else self._apply_rendered(conn, chunk, loader, multi)
            if applied is not None:
                rows += applied
            else:
                for is_delete, run in _runs(
                    chunk,
                    cdc.op_column if cdc else None,
                    cdc.delete_values if cdc else (),
                ):
                    run = _drop_null_keys(run, mysql.key, bad)
                    if is_delete:
                        params = [{k: r[k] for k in mysql.key} for r in run]
                        deleted += _isolating(conn, remove, params, bad)
                    else:
                        rows += _isolating(
                            conn, upsert, _drop_non_finite(run, bad), bad
                        )
            done += chunk.num_rows
            if on_chunk is not None:
                on_chunk(done, batch.rows)
        return rows, deleted, bad

    def _apply_rendered(
        self,
        conn: Connection,
        chunk: pa.RecordBatch,
        loader: BulkLoader | None,
        multi: MultiRowUpsert | None,
    ) -> int | None:
        """Apply a chunk rendered in Arrow (LOAD DATA if enabled, else multi-row
        INSERTs); None means: let the driver render it value by value, which
        quarantines null keys and isolates rows MySQL rejects."""
        if any(chunk.column(k).null_count for k in self.config.mysql.key):
            return None
        if loader is not None and self._bulk_load_allowed:
            applied = self._attempt(conn, loader.apply, chunk)
            if applied is not None:
                return applied
        if multi is not None and multi.renders(chunk):
            return self._attempt(conn, multi.apply, chunk)
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
            self._bulk_load_allowed = False
            log.warning(
                "sink %s: LOAD DATA LOCAL INFILE refused (%s); using multi-row "
                "INSERTs instead. Set local_infile=1 on the server, or "
                "mysql.local_infile = false",
                self.sink_id,
                first_line(e),
            )
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

    def _wrap(self, e: DBAPIError, batch_id: int) -> Exception:
        code = error_code(e)
        reason = f"MySQL error {code}: {first_line(e.orig)}" if code else first_line(e)
        if is_transient(e):
            return TransientError(reason, sink_id=self.sink_id, batch_id=batch_id)
        return TerminalError(
            reason,
            sink_id=self.sink_id,
            batch_id=batch_id,
            table=self.config.mysql.table,
        )


def reflect_target(engine: Engine, name: str) -> Table:
    """Reflect the target table, refusing a missing or non-transactional one."""
    with engine.connect() as conn:
        engine_name = conn.execute(
            text(
                "SELECT ENGINE FROM information_schema.TABLES "
                "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = :t"
            ),
            {"t": name},
        ).scalar_one_or_none()
        if engine_name is None:
            raise TerminalError(
                "target table does not exist; create it first", table=name
            )
        if engine_name.upper() != "INNODB":
            raise TerminalError(
                f"target table uses {engine_name}; it must be InnoDB (transactional) "
                "for batches to be applied atomically",
                table=name,
            )
        try:
            return Table(name, MetaData(), autoload_with=conn)
        except NoSuchTableError:
            raise TerminalError("target table does not exist", table=name) from None


def _runs(
    chunk: pa.RecordBatch, op_column: str | None, delete_values: tuple[str, ...]
) -> Iterator[tuple[bool, list[dict[str, Any]]]]:
    """Split a chunk into consecutive runs of upserts and deletes, order kept."""
    rows = _python_rows(chunk)
    if op_column is None:
        yield False, rows
        return
    run: list[dict[str, Any]] = []
    run_is_delete = False
    for row in rows:
        is_delete = row.pop(op_column) in delete_values
        if run and is_delete != run_is_delete:
            yield run_is_delete, run
            run = []
        run_is_delete = is_delete
        run.append(row)
    if run:
        yield run_is_delete, run


def _python_rows(chunk: pa.RecordBatch) -> list[dict[str, Any]]:
    """Rows as dicts for the driver; zoned timestamps become naive UTC (session TZ)."""
    columns = []
    for field_, column in zip(chunk.schema, chunk.columns):
        if pa.types.is_timestamp(field_.type) and field_.type.tz is not None:
            column = column.cast(pa.timestamp(field_.type.unit))
        columns.append(column)
    return pa.RecordBatch.from_arrays(columns, names=chunk.schema.names).to_pylist()


def _drop_null_keys(
    run: list[dict[str, Any]], key: tuple[str, ...], bad: list[Entry]
) -> list[dict[str, Any]]:
    kept = []
    for row in run:
        missing = [k for k in key if row.get(k) is None]
        if missing:
            bad.append(Entry(row, f"null key column(s): {', '.join(missing)}"))
        else:
            kept.append(row)
    return kept


def _drop_non_finite(
    run: list[dict[str, Any]], bad: list[Entry]
) -> list[dict[str, Any]]:
    """Rows to upsert holding a NaN or infinite float: no MySQL column can store one
    (the driver refuses them before the server sees them)."""
    kept = []
    for row in run:
        not_finite = [
            c for c, v in row.items() if isinstance(v, float) and not math.isfinite(v)
        ]
        if not_finite:
            bad.append(
                Entry(
                    row,
                    f"NaN or infinity in column(s): {', '.join(not_finite)}; "
                    "MySQL cannot store it",
                )
            )
        else:
            kept.append(row)
    return kept


def _isolating(
    conn: Connection, stmt: Executable, rows: list[dict[str, Any]], bad: list[Entry]
) -> int:
    """Execute ``stmt`` for ``rows`` under a savepoint; when MySQL rejects a row's
    values, bisect to find the rejected rows, set them aside, apply the rest in
    order. Returns how many rows were applied."""
    if not rows:
        return 0
    savepoint = conn.begin_nested()
    try:
        conn.execute(stmt, rows)
    except DBAPIError as e:
        # Anything but a row error (a deadlock, a lost link) may have ended the
        # whole transaction, savepoint included: leave it to the transaction.
        if not is_row_error(e):
            raise
        savepoint.rollback()
        if len(rows) == 1:
            bad.append(
                Entry(rows[0], f"MySQL error {error_code(e)}: {first_line(e.orig)}")
            )
            return 0
    else:
        savepoint.commit()
        return len(rows)
    middle = len(rows) // 2
    return _isolating(conn, stmt, rows[:middle], bad) + _isolating(
        conn, stmt, rows[middle:], bad
    )
