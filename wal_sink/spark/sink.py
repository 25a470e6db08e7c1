"""WalSink: the object a streaming query hands its micro-batches to.

    with WalSink.from_config("conf/x.toml") as sink:
        sink.recover(spark)
        query = (df.writeStream.foreachBatch(sink.foreach_batch)
                 .option("checkpointLocation", ...).start())
        query.awaitTermination()
    # leaving the block applies what is staged, then closes

Per batch (docs/protocol.md): stage to the WAL (Step 1: executors write Parquet,
delta-rs commits it) and return, so Spark records the batch (Step 2); a committer thread
applies staged batches to MySQL behind Spark, in batch order, each with its ack row
(Step 3). On start the lease is taken (epoch + 1) and staged batches without an ack
are applied first.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import ArrayType, MapType, StructType
from sqlalchemy import Engine

from wal_sink.config import Config, load_config
from wal_sink.config.spelling import Spelling, spelled_config
from wal_sink.errors import CheckpointResetError, FencedError
from wal_sink.metrics import SinkMetrics
from wal_sink.mysql.row_screen import check_json_targets
from wal_sink.mysql.target import reflect_target
from wal_sink.protocol.committer import CommitResult
from wal_sink.protocol.pipeline import Applied, Handoff, record_applied
from wal_sink.protocol.recovery import check_checkpoint, check_commit_log
from wal_sink.protocol.sink_instance import SinkInstance
from wal_sink.protocol.stop_signal import StopSignal
from wal_sink.spark.checkpoint import (
    PlanningTimes,
    last_committed_batch,
    last_planned_batch,
)
from wal_sink.spark.staging import Laps, StageTimes, stage
from wal_sink.spark.stream_schema import arrow_schema

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StageReport:
    """What one ``foreach_batch`` call did, for the job's per-batch log line."""

    batch_id: int
    rows: int | None
    """None when the WAL already held the batch (a re-delivery)."""
    stage_ms: float
    pending: int
    """Staged batches waiting for MySQL, this one included."""
    parts: dict[str, float]
    """Where the batch's time went, in ms, in the order it was spent: ``plan``
    (Spark, from the batch's offset log entry to the foreachBatch call),
    ``lease`` (lease and column checks), ``wait`` (backpressure), then staging's
    ``check``, ``collect``, ``write``, ``list`` and ``delta`` (StageTimes), and
    ``handoff`` (reading the planning time, handing the batch to the
    committer)."""
    from_driver: bool = False
    """Whether the batch was written from the driver (a small batch)."""


class WalSink(SinkInstance):
    """Exactly-once sink for one ``sink.id``; not shared between queries.

    ``close()`` is not guaranteed to be called (a crash, SIGKILL): whatever is staged
    and not applied then is applied by the next start's recovery.
    """

    def __init__(
        self,
        config: Config,
        engine: Engine | None = None,
        *,
        on_applied: Callable[[Applied], None] | None = None,
        stop: StopSignal | None = None,
        metrics: SinkMetrics | None = None,
    ) -> None:
        super().__init__(config, engine, stop=stop, metrics=metrics)
        self.on_applied = on_applied
        self._planning_times: PlanningTimes | None = None
        self._first_batch_seen = False
        self.last_stage: StageReport | None = None
        self._last_rows: int | None = None

    @classmethod
    def from_config(cls, config: Config | str | os.PathLike[str]) -> WalSink:
        if not isinstance(config, Config):
            config = load_config(Path(config))
        return cls(config)

    def __enter__(self) -> WalSink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def recover(
        self, spark: SparkSession | None = None, checkpoint: str | None = None
    ) -> list[CommitResult]:
        """Take the lease, check the checkpoint both ways (I7), apply unacked batches
        in order.

        Args:
            spark: needed to read the checkpoint; without it the check is left to
                the first batch (see ``foreach_batch``).
            checkpoint: the query's checkpointLocation; defaults to ``[job]``'s.
        """
        self.start()
        checkpoint = checkpoint or (
            self.config.job.checkpoint if self.config.job else None
        )
        spark = spark or SparkSession.getActiveSession()
        if spark is None or checkpoint is None:
            log.warning(
                "sink %s: the query's checkpoint is not known to the sink (give "
                "recover() the spark session and the checkpointLocation, or set "
                "[job] checkpoint): a replaced checkpoint is found only at its "
                "first batch, and not at all while the sink holds batch 0 alone",
                self.sink_id,
            )
        else:
            self._planning_times = PlanningTimes(spark, checkpoint)
            check_checkpoint(
                self.sink_id,
                checkpoint,
                last_planned_batch(spark, checkpoint),
                self.high_water,
            )
            check_commit_log(
                self.sink_id,
                checkpoint,
                last_committed_batch(spark, checkpoint),
                self.known,
            )
        return super().recover()

    def foreach_batch(
        self,
        df: DataFrame | Callable[[], DataFrame],
        batch_id: int,
        probe: DataFrame | None = None,
    ) -> None:
        """The ``foreachBatch`` function: stage, hand over to the committer, return.

        ``probe``: ``df``'s rows in a plan of its own, for a small batch's collect;
        ``df`` may then be a function building its frame, called only when the
        executors write the batch (see ``stage``). Raises the committer's failure,
        if it stopped on one, at this batch boundary.
        """
        called_ms = time.time() * 1000
        laps = Laps()
        self.start()
        pipeline = self.start_pipeline(self.config.wal.max_pending, self._applied)
        self._guard_first_batch(batch_id)
        self._check_lease(batch_id)
        if probe is None and callable(df):
            df = df()
        rows = probe if probe is not None else df  # a frame of the batch's rows
        self.check_columns(rows.columns)
        lease_ms = laps.lap()
        # Backpressure: at most wal.max_pending staged batches wait for MySQL.
        pipeline.wait_for_room()
        wait_ms = laps.lap()
        # Step 1. Stage (None: the WAL already holds this batch; apply what it holds).
        cdc = spelled_config(self.config, Spelling(rows.columns)).cdc
        order_by = cdc.order_by if cdc else None  # as the stream spells it
        times = StageTimes()
        staged = stage(
            df, self.writer, batch_id, order_by, times, self.driver_stage_rows, probe
        )
        if staged is not None:
            self._last_rows = staged.rows
        stage_ms = laps.lap()
        planned = self._planning_times(batch_id) if self._planning_times else None
        # Step 2. Hand over; returning lets Spark record the batch in its commit log.
        pipeline.submit(Handoff(batch_id, staged, planned))
        parts = {
            "plan": max(0.0, called_ms - planned) if planned is not None else 0.0,
            "lease": lease_ms,
            "wait": wait_ms,
            "check": times.check_ms,
            "collect": times.collect_ms,
            "write": times.write_ms,
            "list": times.list_ms,
            "delta": times.delta_ms,
            "handoff": laps.lap(),
        }
        self.last_stage = StageReport(
            batch_id,
            staged.rows if staged else None,
            stage_ms,
            pipeline.pending,
            parts,
            times.from_driver,
        )
        self.metrics.batches_staged.inc()
        self.metrics.last_staged_batch.set(batch_id)
        self.metrics.stage_seconds.observe(stage_ms / 1000)
        self.metrics.observe_parts(parts)
        self.metrics.batches_pending.set(pipeline.pending)

    @property
    def driver_stage_rows(self) -> int:
        """The next batch is staged from the driver when it has at most this many
        rows: ``wal.driver_stage_rows`` right after a batch this process staged
        with at most that many, else 0 (the first batch, one after a larger
        batch: finding out costs a Spark job, which measured up to 1.5 s on a
        first 250,000-row batch)."""
        limit = self.config.wal.driver_stage_rows
        small = self._last_rows is not None and self._last_rows <= limit
        return limit if small else 0

    @property
    def pending(self) -> int:
        """Staged batches not yet applied by this instance's committer."""
        return self._pipeline.pending if self._pipeline else 0

    @property
    def failure(self) -> BaseException | None:
        """What stopped the committer, if anything did."""
        return self._pipeline.failure if self._pipeline else None

    def check(self) -> None:
        """Raise the committer's failure, if it stopped on one."""
        if self._pipeline is not None:
            self._pipeline.check()

    def drain(self, timeout: float | None = None) -> bool:
        """Wait until the committer applied everything staged; False when it failed
        or the timeout passed (what is left stays staged for the next start)."""
        return self._pipeline.drain(timeout) if self._pipeline else True

    def close(self, timeout: float | None = None) -> bool:
        """Let the committer apply what is staged, then end its thread and release
        the connections (SinkInstance.close), all within ``timeout`` seconds (None:
        no limit). Returns whether everything staged was applied."""
        deadline = None if timeout is None else time.monotonic() + timeout
        drained = self.drain(timeout)
        super().close(
            None if deadline is None else max(0.0, deadline - time.monotonic())
        )
        return drained

    def _applied(self, applied: Applied) -> None:
        """The committer finished a batch: metrics, then the caller's callback."""
        record_applied(self.metrics, applied)
        if self.on_applied is not None:
            self.on_applied(applied)

    def _check_lease(self, batch_id: int) -> None:
        """Only the lease holder stages. While MySQL is unreachable staging goes on
        unconfirmed: nobody can take the lease from a MySQL that is down, and were
        MySQL only cut off from this instance, what it stages is still fenced at
        COMMIT (I6) and staged once per batch id (I4)."""
        try:
            unconfirmed = self.check_lease(batch_id)
        except FencedError:
            self.metrics.lease_held.set(0)
            raise
        if unconfirmed is not None:
            log.warning(
                "sink %s batch %s: staging without confirming the lease: %s",
                self.sink_id,
                batch_id,
                unconfirmed,
            )

    def _guard_first_batch(self, batch_id: int) -> None:
        """I7 without a checkpoint to read: after a restart Spark's first batch is the
        last planned one or the next, never below what the sink already knows, and
        never beyond the batch after it (Spark would have committed batches the
        sink never staged)."""
        if self._first_batch_seen:
            return
        self._first_batch_seen = True
        known = self.high_water
        if known is not None and batch_id < known:
            raise CheckpointResetError(
                f"Spark delivered batch {batch_id} first, but the WAL/ack table "
                f"already hold batch {known}: the checkpoint was reset or "
                "replaced. Restore it, or start over with a new sink.id and "
                "wal.path",
                sink_id=self.sink_id,
                batch_id=batch_id,
            )
        expected = 0 if known is None else known + 1
        if batch_id > expected:
            raise CheckpointResetError(
                f"Spark delivered batch {batch_id} first, but the WAL/ack table know "
                f"{'no batch' if known is None else f'batches up to {known}'}: Spark "
                f"committed batch(es) {expected}..{batch_id - 1} into a WAL that is "
                "gone (deleted, moved, or wal.path changed). Restore the WAL; to start "
                "over, use a new checkpoint too",
                sink_id=self.sink_id,
                batch_id=batch_id,
            )


def check_stream(instance: SinkInstance, schema: StructType) -> None:
    """Before a query over ``schema`` starts and without taking the lease: create
    and evolve the targets as ``mysql.auto_*`` allow, then refuse (ConfigError) a
    stream the target cannot take as configured — columns of a type the sink cannot
    stage or land, columns the target lacks, columns that reach another row
    through a unique index besides the key (``unique_conflicts``), struct, array
    or map columns whose target column is neither JSON nor text (the sink writes
    such values as JSON text), key, version, order or route columns narrower than
    the stream's type. The committer checks each new schema the same way."""
    arrow = arrow_schema(schema)
    instance.prepare_tables(arrow)
    instance.check_columns(schema.names)
    instance.check_types(arrow)
    nested = {
        f.name: f.dataType.simpleString()
        for f in schema.fields
        if isinstance(f.dataType, (StructType, ArrayType, MapType))
    }
    if nested:
        for target in instance.config.mysql.targets:
            table = reflect_target(instance.engine, target.table)
            check_json_targets(table, {n: k for n, k in nested.items() if n in table.c})
