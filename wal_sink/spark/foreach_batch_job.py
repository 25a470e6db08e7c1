"""The Spark side of the job with ``job.writer = "foreach_batch"`` (the default):
foreachBatch stages each batch through the WalSink (BatchRunner, one log line per
batch) and the sink's committer thread applies staged batches behind Spark, logging
each again (the applying side, without Spark: job/committer_path.py)."""

from __future__ import annotations

import logging
import threading
from contextlib import ExitStack

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import DataStreamWriter, StreamingQuery

from wal_sink.config import Config
from wal_sink.errors import StopRequested
from wal_sink.job.committer_path import CommitterPath
from wal_sink.metrics import SinkMetrics
from wal_sink.ops.housekeeping import scheduled
from wal_sink.protocol.pipeline import Applied, describe
from wal_sink.protocol.stop_signal import StopSignal
from wal_sink.spark.parse_errors import ParseFold, can_fold
from wal_sink.spark.sink import WalSink, check_stream
from wal_sink.spark.staging import Laps

log = logging.getLogger("wal_sink.job")


class BatchRunner:
    """The foreachBatch function: one batch staged through the sink, one log line;
    the committer thread logs the batch again when it is applied. With ``fold``
    the batch is the raw source's, split by it (parse_errors.py). Once ``stop``
    says stop taking batches, it refuses the next."""

    def __init__(self, sink: WalSink, stop: StopSignal) -> None:
        self.sink = sink
        self.stop = stop
        self.fold: ParseFold | None = None
        self.failure: BaseException | None = None
        self._in_progress = threading.Lock()
        """Held while a batch runs through the sink."""

    def wait_for_batch_in_progress(self) -> None:
        """Return once no batch runs through the sink (with ``stop`` set, none
        starts after)."""
        with self._in_progress:
            pass

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        with self._in_progress:
            if self.stop.stopping:
                raise StopRequested("stopping: this batch is left for the next start")
            try:
                if self.fold is None:
                    self.sink.foreach_batch(df, batch_id)
                else:
                    laps = Laps()
                    rows, collect, record_errors = self.fold.rows(
                        df, probe=self.sink.driver_stage_rows > 0
                    )
                    fold_ms = laps.lap()
                    self.sink.foreach_batch(rows, batch_id, collect)
                    laps.lap()
                    report = self.sink.last_stage
                    record_errors(
                        batch_id, None if report.rows is None else report.from_driver
                    )
                    self._fold_parts(report.parts, fold_ms, laps.lap())
            except BaseException as e:
                self.failure = e
                raise
        report = self.sink.last_stage
        rows = "-" if report.rows is None else str(report.rows)
        parts = " ".join(f"{k}_ms={v:.0f}" for k, v in report.parts.items())
        log.info(
            "batch %d staged: rows=%s stage_ms=%.0f pending=%d %s%s",
            batch_id,
            rows,
            report.stage_ms,
            report.pending,
            parts,
            "" if report.rows is not None else " (already staged)",
        )

    def _fold_parts(self, parts: dict[str, float], fold: float, errors: float) -> None:
        """Add the fold's parts to the batch's: ``fold`` (building the batch's
        frames, taken out of ``plan``, which it followed) and ``errors`` (recording
        the parse errors, after the stage)."""
        plan = parts.pop("plan")
        rest = dict(parts)
        parts.clear()
        parts.update(plan=max(0.0, plan - fold), fold=fold, **rest, errors=errors)
        self.sink.metrics.observe_parts({"fold": fold, "errors": errors})


def log_applied(applied: Applied) -> None:
    """The committer's line for each batch it finished."""
    log.info("%s", describe(applied))


class ForeachBatchPath(CommitterPath):
    """foreachBatch stages (BatchRunner), the sink's committer thread applies
    (the applying side, without Spark: job/committer_path.py)."""

    def __init__(self, config: Config, stop: StopSignal, metrics: SinkMetrics) -> None:
        sink = WalSink(config, on_applied=log_applied, stop=stop, metrics=metrics)
        super().__init__(config, sink, BatchRunner(sink, stop))
        self.housekeeping = ExitStack()
        """The scheduled purges, from the start on (ops/housekeeping.py)."""

    def start(self, spark: SparkSession, frame: DataFrame) -> None:
        # The query's columns, checked against the target before the lease.
        self.sink.expect_columns(frame.columns)
        check_stream(self.sink, frame.schema)
        recovered = self.sink.recover(spark, self.config.job.checkpoint)
        if recovered:
            log.info(
                "recovered %d batch(es) before starting: %s",
                len(recovered),
                [r.batch_id for r in recovered],
            )
        self.housekeeping.enter_context(scheduled(self.config, self.sink.metrics))

    def close(self) -> None:
        self.housekeeping.close()
        super().close()

    def attach(self, writer: DataStreamWriter) -> DataStreamWriter:
        return writer.foreachBatch(self.runner)

    def fold_parse_errors(self, frame: DataFrame) -> bool:
        if not can_fold(self.config, frame):
            return False
        self.runner.fold = ParseFold(self.config)
        return True

    def stop_between_batches(self, queries: list[StreamingQuery]) -> None:
        # A batch waiting for room gives up (the pipeline reads the stop signal).
        self.runner.wait_for_batch_in_progress()
        for query in queries:
            query.stop()
