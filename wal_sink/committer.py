"""Step 2 of the protocol: apply one staged batch to MySQL in one transaction.

The transaction, in order (DESIGN.md §2):

1. Lock this sink's lease row and check the epoch (fencing, I6).
2. Insert the ack row (sink id, batch id). Its primary key makes a second apply fail
   fast with a duplicate key: the batch is already applied, roll back and skip (I2).
3. Apply the staged rows, read back from the WAL in bounded chunks, in staged order:
   upserts by merge policy, CDC deletes by key.
4. Fill in the ack row's counts.
5. COMMIT. Rows and ack become visible together (I3), or not at all.

"Already applied" is decided only by the unique insert, never by a snapshot SELECT.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from sqlalchemy import Connection, Engine, MetaData, Table, delete, func, text, update
from sqlalchemy.exc import DBAPIError, IntegrityError, NoSuchTableError

from wal_sink import faults
from wal_sink.config import Config
from wal_sink.errors import TerminalError, TransientError
from wal_sink.lease import check as check_lease
from wal_sink.mysql_errors import DUPLICATE_KEY, error_code, is_transient
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

    def __init__(self, config: Config, engine: Engine, wal: WalReader, epoch: int) -> None:
        self.config = config
        self.engine = engine
        self.wal = wal
        self.epoch = epoch
        self.ack, self.lease = sink_tables(config.mysql)
        self._target: Table | None = None

    @property
    def sink_id(self) -> str:
        return self.config.sink.id

    def target(self) -> Table:
        """The reflected target table; refuses tables that are not InnoDB."""
        if self._target is None:
            self._target = reflect_target(self.engine, self.config.mysql.table)
        return self._target

    def apply(self, batch_id: int, *, force: bool = False,
              on_chunk: ChunkCallback | None = None) -> CommitResult:
        """Apply staged batch ``batch_id`` exactly once.

        Args:
            force: re-apply even if acked (operator replay): the old ack row is
                replaced in the same transaction, so ``add`` columns add again.
            on_chunk: progress callback, called inside the open transaction.

        Raises:
            FencedError: a newer instance holds the lease.
            TransientError: retry the whole call.
            TerminalError: the batch cannot be applied as configured.
        """
        started = time.monotonic()
        self.wal.refresh()
        batch = self.wal.staged_batch(batch_id)
        target = self.target()
        try:
            with self.engine.connect() as conn, conn.begin() as tx:
                # Step 1. Fencing.
                check_lease(conn, self.lease, self.sink_id, self.epoch, lock=True,
                            batch_id=batch_id)
                # Step 2. The ack row first: its primary key stops a second apply.
                if force:
                    conn.execute(delete(self.ack).where(self._ack_row(batch_id)))
                if not self._insert_ack(conn, batch_id):
                    tx.rollback()
                    log.info("sink %s batch %s already applied; skipped",
                             self.sink_id, batch_id)
                    return CommitResult(batch_id, applied=False)
                # Step 3. The staged rows, in bounded chunks and staged order.
                rows, deleted = self._apply_rows(conn, target, batch, on_chunk)
                # Step 4. Complete the ack row.
                conn.execute(
                    update(self.ack).where(self._ack_row(batch_id)).values(
                        row_count=rows, deleted_count=deleted, committed_at=func.now(6)
                    )
                )
                faults.hit("commit.before_commit", batch_id)
                # Step 5. COMMIT (leaving the block).
        except DBAPIError as e:
            raise self._wrap(e, batch_id) from e
        faults.hit("commit.after_commit", batch_id)
        result = CommitResult(batch_id, True, rows, deleted, 0, time.monotonic() - started)
        log.info("sink %s batch %s applied: %s rows, %s deleted in %.3fs",
                 self.sink_id, batch_id, rows, deleted, result.seconds)
        return result

    def is_acked(self, batch_id: int) -> bool:
        with self.engine.connect() as conn:
            return conn.execute(
                self.ack.select().where(self._ack_row(batch_id))
            ).first() is not None

    # --- steps ----------------------------------------------------------------

    def _ack_row(self, batch_id: int):
        return (self.ack.c.sink_id == self.sink_id) & (self.ack.c.batch_id == batch_id)

    def _insert_ack(self, conn: Connection, batch_id: int) -> bool:
        # A failed statement does not end a MySQL transaction; the caller rolls back.
        try:
            conn.execute(self.ack.insert().values(
                sink_id=self.sink_id, batch_id=batch_id, row_count=0,
                deleted_count=0, quarantined=0, epoch=self.epoch,
                committed_at=func.now(6),
            ))
        except IntegrityError as e:
            if error_code(e) == DUPLICATE_KEY:
                return False
            raise
        return True

    def _apply_rows(self, conn: Connection, target: Table, batch: StagedBatch | None,
                    on_chunk: ChunkCallback | None) -> tuple[int, int]:
        if batch is None:
            return 0, 0
        mysql, cdc = self.config.mysql, self.config.cdc
        total = batch.rows
        upsert = None
        remove = build_delete(target, mysql) if cdc else None
        rows = deleted = done = 0
        for chunk in self.wal.read_batch(batch, self.config.wal.chunk_rows):
            if upsert is None:
                columns = [c for c in chunk.schema.names if not cdc or c != cdc.op_column]
                upsert = build_upsert(target, columns, mysql)
            for is_delete, run in _runs(chunk, cdc.op_column if cdc else None,
                                        cdc.delete_values if cdc else ()):
                if is_delete:
                    conn.execute(remove, [{k: r[k] for k in mysql.key} for r in run])
                    deleted += len(run)
                else:
                    conn.execute(upsert, run)
                    rows += len(run)
            done += chunk.num_rows
            if on_chunk is not None:
                on_chunk(done, total)
        return rows, deleted

    def _wrap(self, e: DBAPIError, batch_id: int) -> Exception:
        code = error_code(e)
        reason = f"MySQL error {code}: {_first_line(e.orig)}" if code else _first_line(e)
        if is_transient(e):
            return TransientError(reason, sink_id=self.sink_id, batch_id=batch_id)
        return TerminalError(reason, sink_id=self.sink_id, batch_id=batch_id,
                             table=self.config.mysql.table)


def reflect_target(engine: Engine, name: str) -> Table:
    """Reflect the target table, refusing a missing or non-transactional one."""
    with engine.connect() as conn:
        engine_name = conn.execute(
            text("SELECT ENGINE FROM information_schema.TABLES "
                 "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = :t"),
            {"t": name},
        ).scalar_one_or_none()
        if engine_name is None:
            raise TerminalError("target table does not exist; create it first", table=name)
        if engine_name.upper() != "INNODB":
            raise TerminalError(
                f"target table uses {engine_name}; it must be InnoDB (transactional) "
                "for batches to be applied atomically", table=name)
        try:
            return Table(name, MetaData(), autoload_with=conn)
        except NoSuchTableError:
            raise TerminalError("target table does not exist", table=name) from None


def _runs(chunk: pa.RecordBatch, op_column: str | None,
          delete_values: tuple[str, ...]) -> Iterator[tuple[bool, list[dict[str, Any]]]]:
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


def _first_line(obj: object) -> str:
    return str(obj).strip().splitlines()[0] if str(obj).strip() else type(obj).__name__
