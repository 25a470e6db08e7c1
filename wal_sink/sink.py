"""WalSink: the object a streaming query hands its micro-batches to.

    sink = WalSink.from_config("conf/x.toml")
    sink.recover()
    df.writeStream.foreachBatch(sink.foreach_batch).option("checkpointLocation", ...)

Per batch (DESIGN.md §2): stage to the WAL (Step 1: executors write Parquet, delta-rs
commits it), apply in one MySQL transaction with the ack row (Step 2), return so
Spark records the batch (Step 3). On start the lease is taken (epoch + 1) and staged
batches without an ack are applied first.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from sqlalchemy import Engine

from wal_sink import lease
from wal_sink.checkpoint import last_planned_batch
from wal_sink.committer import CommitResult
from wal_sink.config import Config, load_config
from wal_sink.errors import CheckpointResetError
from wal_sink.instance import SinkInstance
from wal_sink.recovery import check_checkpoint
from wal_sink.staging import stage


@dataclass(frozen=True)
class BatchReport:
    """What one ``foreach_batch`` call did, for the job's per-batch log line."""

    result: CommitResult
    stage_ms: float
    commit_ms: float


class WalSink(SinkInstance):
    """Exactly-once sink for one ``sink.id``; not shared between queries."""

    def __init__(self, config: Config, engine: Engine | None = None) -> None:
        super().__init__(config, engine)
        self._first_batch_seen = False
        self.last_report: BatchReport | None = None

    @classmethod
    def from_config(cls, config: Config | str | os.PathLike[str]) -> WalSink:
        if not isinstance(config, Config):
            config = load_config(Path(config))
        return cls(config)

    def recover(
        self, spark: SparkSession | None = None, checkpoint: str | None = None
    ) -> list[CommitResult]:
        """Take the lease, check the checkpoint (I7), apply unacked batches in order.

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
        if spark is not None and checkpoint is not None:
            location = self.config.resolve(checkpoint)
            check_checkpoint(
                self.sink_id,
                location,
                last_planned_batch(spark, location),
                self.high_water,
            )
        return super().recover()

    def foreach_batch(self, df: DataFrame, batch_id: int) -> None:
        """The ``foreachBatch`` function: stage, then commit, then return to Spark."""
        committer = self.start()
        self._guard_first_batch(batch_id)
        # Only the lease holder stages.
        with self.engine.connect() as conn:
            lease.check(
                conn,
                self.lease,
                self.sink_id,
                committer.epoch,
                lock=False,
                batch_id=batch_id,
            )
        # Step 1. Stage (None: the WAL already holds this batch, apply what it holds).
        started = time.monotonic()
        order_by = self.config.cdc.order_by if self.config.cdc else None
        staged = stage(df, self.writer, batch_id, order_by)
        staged_at = time.monotonic()
        # Step 2. Commit. Step 3 is returning: Spark then writes its commit log.
        result = committer.apply(batch_id, batch=staged)
        self.last_report = BatchReport(
            result, (staged_at - started) * 1000, (time.monotonic() - staged_at) * 1000
        )

    def _guard_first_batch(self, batch_id: int) -> None:
        """I7 without a checkpoint to read: after a restart Spark's first batch is the
        last planned one or the next, never below what the sink already knows."""
        if self._first_batch_seen:
            return
        self._first_batch_seen = True
        if self.high_water is not None and batch_id < self.high_water:
            raise CheckpointResetError(
                f"Spark delivered batch {batch_id} first, but the WAL/ack table "
                "already "
                f"hold batch {self.high_water}: the checkpoint was reset or replaced. "
                "Restore it, or use a new sink.id",
                sink_id=self.sink_id,
                batch_id=batch_id,
            )
