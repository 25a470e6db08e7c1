"""The data source's ``commit``: Step 1's driver half for ``format("wal_sink")``.

Executors wrote a batch's files into the WAL and returned what each add action
needs (task_files.py). ``StageCommitter.commit`` turns exactly those files into the
batch's one Delta commit, in order:

1. The files fit together: one batch, disjoint ``_wal_seq`` ranges and, with CDC,
   order-column ranges that follow each other in ``_wal_seq`` order.
2. Fencing (I6): this query run still holds the WAL (writer_run.py); a zombie gets
   ``FencedError`` before anything else is decided.
3. Checkpoint and WAL agree (I7): Spark's batch id is never below what the WAL or
   the follower know (a reset or replaced checkpoint), nor more than one above (the
   WAL was lost, moved or pointed elsewhere: the batches between would never be
   applied). Spark calls commit again for the batch the WAL staged last after a
   crash; that one is staged already and nothing is committed (I4) — when the
   same checkpoint staged it. A batch id alone cannot tell that re-delivery from a
   new checkpoint's batch 0 right after one staged batch (a pipeline's full
   refresh), whose next batches would read the source again from the start: each
   commit records the checkpoint's query id (writer_run.py), and a batch staged
   by another checkpoint is refused.
4. Backpressure: at most ``wal.max_pending`` staged batches wait for MySQL, counted
   against the applied position the follower publishes (applied_position.py).
   While there is no room the commit, and the query with it, waits; when nothing
   is applied for ``mysql.outage_budget`` it fails (TransientError) instead of
   waiting on a follower that is gone.
5. Commit with ``WalWriter.commit``, which re-checks the run's claim on the
   commit's own snapshot.

Nothing here reaches MySQL: the Spark side needs no password.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import pyarrow as pa

from wal_sink.config import Config
from wal_sink.errors import (
    CheckpointResetError,
    TerminalError,
    TransientError,
    first_line,
)
from wal_sink.protocol.recovery import check_checkpoint
from wal_sink.storage import Storage, is_s3
from wal_sink.wal.applied_position import AppliedPosition
from wal_sink.wal.spark_checkpoint import query_id
from wal_sink.wal.task_files import TaskFile, file_schema
from wal_sink.wal.writer import WalWriter, WrittenFile
from wal_sink.wal.writer_run import WriterRun

log = logging.getLogger(__name__)

LOCAL_WAIT = 0.05
OBJECT_STORE_WAIT = 0.25
"""Seconds between two reads of the applied position while waiting for room."""

_writers: dict[tuple[str, str, Storage], WalWriter] = {}
_writers_lock = threading.Lock()
_checkpoint_ids: dict[tuple[str, str], str | None] = {}


def writer_for(location: str, sink_id: str, storage: Storage) -> WalWriter:
    """One WalWriter per WAL and process: Python workers are reused between
    commits, and a kept delta-rs handle only reads the log's new versions."""
    with _writers_lock:
        key = (location, sink_id, storage)
        if key not in _writers:
            _writers[key] = WalWriter(location, sink_id, storage)
        return _writers[key]


def checkpoint_id(
    run: WriterRun, checkpoint: str | None, storage: Storage
) -> str | None:
    """The query id of ``checkpoint``, read once per query run; None (said once,
    as a warning) when there is none to read."""
    key = (run.token, checkpoint or "")
    if key not in _checkpoint_ids:
        found = None
        if checkpoint is not None:
            try:
                found = query_id(storage, checkpoint)
            except (OSError, pa.ArrowException) as e:
                log.warning(
                    "sink %s: cannot read %s/metadata: %s",
                    run.sink_id,
                    checkpoint,
                    first_line(e),
                )
        if found is None:
            log.warning(
                "sink %s: the query's checkpoint id is unknown (no readable "
                "checkpointLocation option): a checkpoint replaced right after its "
                "first batch cannot be told from a re-delivery of that batch",
                run.sink_id,
            )
        _checkpoint_ids[key] = found
    return _checkpoint_ids[key]


@dataclass(frozen=True)
class StageOutcome:
    staged: bool
    """False when the WAL already held the batch (a commit Spark repeated)."""
    rows: int
    files: int
    pending: int
    """Staged batches waiting for MySQL before this one, as last counted."""
    waited_s: float
    """Time spent waiting for room (backpressure)."""


class StageCommitter:
    """Commits staged batches of one query run; built per ``commit`` call."""

    def __init__(
        self,
        config: Config,
        run: WriterRun,
        checkpoint: str | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.config = config
        self.run = replace(
            run, checkpoint_id=checkpoint_id(run, checkpoint, config.storage)
        )
        self.checkpoint = checkpoint or "the query's checkpointLocation"
        self.writer = writer_for(config.wal_path, config.sink.id, config.storage)
        self.position = AppliedPosition(config.wal_path, config.storage)
        self.clock = clock
        self.sleep = sleep
        self.wait_step = OBJECT_STORE_WAIT if is_s3(config.wal_path) else LOCAL_WAIT

    @property
    def sink_id(self) -> str:
        return self.config.sink.id

    def commit(
        self, batch_id: int, tasks: list[TaskFile], schema: pa.Schema
    ) -> StageOutcome:
        """Stage batch ``batch_id`` from its tasks' files, whose stream columns
        are ``schema`` (see the module docstring for the steps)."""
        # Step 1. The files fit together.
        files = self._files(batch_id, tasks)
        # Step 2. Fencing.
        table = self.writer.snapshot()
        self.run.transactions(table, batch_id)
        staged = None if table is None else table.transaction_version(self.sink_id)
        # Step 3. Checkpoint and WAL agree.
        applied = self.position.read()
        self._check_batch_id(batch_id, staged, applied)
        if staged == batch_id:
            self._check_redelivery(table, batch_id)
            return StageOutcome(False, 0, 0, self._pending(staged, applied), 0.0)
        # Step 4. Backpressure.
        started = self.clock()
        pending = self._wait_for_room(batch_id, staged, applied)
        waited = self.clock() - started
        # Step 5. Commit.
        done = self.writer.commit(batch_id, files, file_schema(schema), self.run)
        rows = sum(f.rows for f in files)
        return StageOutcome(done, rows if done else 0, len(files), pending, waited)

    def _files(self, batch_id: int, tasks: list[TaskFile]) -> list[WrittenFile]:
        ordered = sorted(tasks, key=lambda t: t.file.min_seq or 0)
        for before, after in zip(ordered, ordered[1:]):
            if (before.file.max_seq or 0) >= (after.file.min_seq or 0):
                raise TerminalError(
                    f"two files of this batch overlap in _wal_seq ({before.file.path}"
                    f", {after.file.path}); it is not staged",
                    sink_id=self.sink_id,
                    batch_id=batch_id,
                )
            if before.order and after.order and not _follows(before, after):
                order_by = self.config.cdc.order_by if self.config.cdc else "?"
                raise TerminalError(
                    f"with [cdc] the rows must reach the sink range-partitioned on "
                    f"{order_by!r}, but two tasks' ranges overlap; add "
                    f'.repartitionByRange("{order_by}") before writeStream',
                    sink_id=self.sink_id,
                    batch_id=batch_id,
                )
        return [t.file for t in ordered]

    def _check_batch_id(
        self, batch_id: int, staged: int | None, applied: int | None
    ) -> None:
        known = max((b for b in (staged, applied) if b is not None), default=None)
        check_checkpoint(self.sink_id, self.checkpoint, batch_id, known)
        expected = (known if known is not None else -1) + 1
        if batch_id > expected:
            raise CheckpointResetError(
                f"Spark delivers batch {batch_id}, but the WAL at "
                f"{self.config.wal_path} holds batches up to {staged} and the "
                f"follower reports batches up to {applied} applied: the WAL was "
                f"lost, moved or pointed elsewhere, and batches {expected}.."
                f"{batch_id - 1} would never be applied. Restore the WAL, or start "
                "over with a new sink.id and a new checkpoint",
                sink_id=self.sink_id,
                batch_id=batch_id,
            )

    def _check_redelivery(self, table, batch_id: int) -> None:
        """Spark delivers the staged batch ``batch_id`` again: only its own
        checkpoint may (see the module docstring, step 3)."""
        if self.run.staged_by_this_checkpoint(table, batch_id) is not False:
            return
        raise CheckpointResetError(
            f"the WAL holds batch {batch_id} staged from another checkpoint than "
            f"{self.checkpoint!r} (query id {self.run.checkpoint_id}): the Spark "
            "checkpoint was reset or replaced, and its batches would read the "
            "source again from the start. Restore the original checkpoint, or start "
            "over with a new sink.id and a wal.path of its own (or clear this "
            "sink's WAL and ack rows)",
            sink_id=self.sink_id,
            batch_id=batch_id,
        )

    @staticmethod
    def _pending(staged: int | None, applied: int | None) -> int:
        if staged is None:
            return 0
        return max(0, staged - (applied if applied is not None else -1))

    def _wait_for_room(
        self, batch_id: int, staged: int | None, applied: int | None
    ) -> int:
        """Wait while ``wal.max_pending`` staged batches wait for MySQL; return how
        many wait. Raises TransientError when none is applied for the outage
        budget."""
        limit = self.config.wal.max_pending
        budget = self.config.mysql.outage_budget
        since = self.clock()
        warned = False
        while (pending := self._pending(staged, applied)) >= limit:
            if self.clock() - since >= budget:
                raise TransientError(
                    f"{pending} staged batch(es) wait for MySQL and none was applied "
                    f"for {budget:.0f}s (mysql.outage_budget): is `wal-sink follow` "
                    "running for this sink?",
                    sink_id=self.sink_id,
                    batch_id=batch_id,
                )
            if not warned:
                log.info(
                    "sink %s batch %s: %d staged batch(es) wait for MySQL; waiting "
                    "for room (wal.max_pending = %d)",
                    self.sink_id,
                    batch_id,
                    pending,
                    limit,
                )
                warned = True
            self.sleep(self.wait_step)
            now = self.position.read()
            if now != applied:
                applied, since = now, self.clock()
        return pending


def _follows(before: TaskFile, after: TaskFile) -> bool:
    """``after``'s order values all sort at or after ``before``'s (nulls first)."""
    first, then = before.order, after.order
    if then.has_null:
        return first.high is None  # only an all-null file may come before nulls
    return first.high is None or then.low is None or first.high <= then.low
