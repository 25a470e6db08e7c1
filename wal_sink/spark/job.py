"""The streaming job: source -> transform -> WalSink, restarted by a strategy.

Each attempt takes the lease, checks the checkpoint and applies unacked batches
(recovery) before the query starts from its checkpoint. For parsed sources (kafka,
json, csv) a second query beside it sends unparseable records to the quarantine.
Batches are staged by the query and applied by the sink's committer thread behind
it. SIGTERM stops the query after the batch in progress and lets the committer apply
what is staged (stop.py). Exit codes: 0 done (drained, or stopped), 1 failed (the
restart strategy gave up, or a terminal error), 2 configuration error.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from wal_sink.config import Config
from wal_sink.durations import parse_duration
from wal_sink.errors import ConfigError, StopRequested, TerminalError, first_line
from wal_sink.metrics import SinkMetrics
from wal_sink.protocol.pipeline import Applied
from wal_sink.protocol.recovery import check_checkpoint
from wal_sink.spark.checkpoint import last_planned_batch
from wal_sink.spark.restart import RestartPolicy
from wal_sink.spark.sink import WalSink
from wal_sink.spark.source import (
    CORRUPT_COLUMN,
    corrupt_records,
    read_source,
    streaming_frame,
)
from wal_sink.spark.stop import GracefulStop
from wal_sink.wal.quarantine import Entry, Quarantine

log = logging.getLogger("wal_sink.job")

EXIT_OK, EXIT_FAILED, EXIT_CONFIG = 0, 1, 2
PARSE_STREAM = "parse"
PARSE_CHECKPOINT_SUFFIX = "_parse_errors"
# The parse-error query triggers this many times less often than the sink's, taking
# that many times more input per trigger: its records are rare, and each trigger
# costs the driver a planning round and two checkpoint writes that would otherwise
# compete with the sink's own (a 100-row trigger: about 300 ms, as long as the
# sink's). With rate limits scaled alike it keeps up with the same stream.
PARSE_TRIGGER_FACTOR = 10


class BatchRunner:
    """The foreachBatch function: one batch staged through the sink, one log line;
    the committer thread logs the batch again when it is applied."""

    def __init__(self, sink: WalSink, stop: GracefulStop, checkpoint: str) -> None:
        self.sink = sink
        self.stop = stop
        self.checkpoint = checkpoint
        self.failure: BaseException | None = None

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        with self.stop.batch_lock:
            if self.stop.stopping:
                raise StopRequested("stopping: this batch is left for the next start")
            try:
                self.sink.foreach_batch(df, batch_id)
            except BaseException as e:
                self.failure = e
                raise
        report = self.sink.last_stage
        rows = "-" if report.rows is None else str(report.rows)
        log.info(
            "batch %d staged: rows=%s stage_ms=%.0f pending=%d%s",
            batch_id,
            rows,
            report.stage_ms,
            report.pending,
            "" if report.rows is not None else " (already staged)",
        )


def log_applied(applied: Applied) -> None:
    """The committer's line for each batch it finished."""
    r = applied.result
    if not r.applied:
        log.info("batch %d already applied", r.batch_id)
        return
    lag = "-" if applied.lag_ms is None else f"{applied.lag_ms:.0f}"
    log.info(
        "batch %d applied: rows=%d deleted=%d quarantined=%d%s commit_ms=%.0f "
        "lag_ms=%s pending=%d",
        r.batch_id,
        r.rows,
        r.deleted,
        r.quarantined,
        f" skipped={r.skipped}" if r.skipped else "",
        r.seconds * 1000,
        lag,
        applied.pending,
    )


class ParseErrorRunner:
    """foreachBatch of the parse-error stream: raw records into the quarantine.

    Only records Spark could not parse reach it, so collecting them is bounded by the
    garbage in the source, not by the batch size.
    """

    def __init__(self, config: Config) -> None:
        self.quarantine = Quarantine(
            config.quarantine_path, config.sink.id, storage=config.storage
        )
        self.app_id = f"{config.sink.id}:{PARSE_STREAM}"  # ':' is not in a sink id
        self.reason = (
            f"could not parse as {config.source.format} with source.schema "
            "(parse-error stream batch {batch})"
        )

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        entries = [
            Entry({"raw": row[0]}, self.reason.format(batch=batch_id))
            for row in df.select(CORRUPT_COLUMN).collect()
        ]
        self.quarantine.record(self.app_id, batch_id, entries)
        if entries:
            log.warning(
                "%d unparseable record(s) quarantined in %s",
                len(entries),
                self.quarantine.path,
            )


def start_query(
    df: DataFrame,
    name: str,
    run: Callable[[DataFrame, int], None],
    checkpoint: str,
    config: Config,
    available_now: bool,
    output_mode: str,
    trigger_factor: int = 1,
) -> StreamingQuery:
    writer = (
        df.writeStream.queryName(name)
        .outputMode(output_mode)
        .foreachBatch(run)
        .option("checkpointLocation", checkpoint)
    )
    if available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(
            processingTime=f"{parse_duration(config.job.trigger) * trigger_factor} "
            "seconds"
        )
    return writer.start()


def start_queries(
    spark: SparkSession,
    config: Config,
    runner: BatchRunner,
    available_now: bool,
    frame: DataFrame,
) -> list[StreamingQuery]:
    """The sink's query over ``frame`` and, for parsed formats, the parse-error query
    beside it."""
    name = f"wal_sink_{config.sink.id}".replace("-", "_").replace(".", "_")
    runner.sink.check_stream_schema(frame.schema)
    queries = [
        start_query(
            frame,
            name,
            runner,
            runner.checkpoint,
            config,
            available_now,
            config.job.output_mode,
        )
    ]
    corrupt = corrupt_records(read_source(spark, config, PARSE_TRIGGER_FACTOR))
    if corrupt is not None:
        checkpoint = runner.checkpoint.rstrip("/") + PARSE_CHECKPOINT_SUFFIX
        side = ParseErrorRunner(config)
        check_checkpoint(
            config.sink.id,
            checkpoint,
            last_planned_batch(spark, checkpoint),
            side.quarantine.version(side.app_id),
        )
        queries.append(
            start_query(
                corrupt,
                f"{name}_parse_errors",
                side,
                checkpoint,
                config,
                available_now,
                "append",
                PARSE_TRIGGER_FACTOR,
            )
        )
    return queries


def run_job(
    config: Config, *, available_now: bool, spark: SparkSession | None = None
) -> int:
    """Run until drained (``available_now``), stopped, or the strategy gives up."""
    if config.job is None:
        raise ConfigError("config section [job] is missing; the job needs it")
    spark = spark or (
        SparkSession.builder.appName(f"wal_sink {config.sink.id}").getOrCreate()
    )
    for key, value in config.job.spark_conf.items():
        spark.conf.set(key, value)
    config.storage.configure_spark(spark)  # S3A settings before any s3a:// access
    checkpoint = config.job.checkpoint
    stop = GracefulStop()
    stop.install(spark)
    policy = RestartPolicy(config.job.restart)
    metrics = SinkMetrics(config.sink.id)
    if config.job.metrics_port is not None:
        metrics.serve(config.job.metrics_port, config.job.metrics_host)
        log.info(
            "metrics at http://%s:%d/metrics",
            config.job.metrics_host,
            config.job.metrics_port,
        )
    while True:
        sink = WalSink(config, on_applied=log_applied, stop=stop.now, metrics=metrics)
        runner = BatchRunner(sink, stop, checkpoint)
        queries: list[StreamingQuery] = []
        try:
            frame = streaming_frame(spark, config, read_source(spark, config))
            # The query's columns, checked against the target before the lease.
            sink.expect_columns(frame.columns)
            recovered = sink.recover(spark, checkpoint)
            if recovered:
                log.info(
                    "recovered %d batch(es) before starting: %s",
                    len(recovered),
                    [r.batch_id for r in recovered],
                )
            queries = start_queries(spark, config, runner, available_now, frame)
            while any(q.isActive for q in queries):
                for query in queries:
                    query.awaitTermination(0.25)  # raises if the query failed
                sink.check()  # a committer failure stops the job, even when idle
                if stop.requested and not stop.stopping:
                    sink.stop_taking_batches()
                    stop.stop_between_batches(queries)
            return _finish(sink, config, stop)
        except ConfigError as e:
            log.error("%s", e)
            return EXIT_CONFIG
        except TerminalError as e:
            log.error("%s", e)
            return EXIT_FAILED
        except Exception as e:  # StreamingQueryException, TransientError, lost MySQL
            cause = runner.failure or sink.failure or e
            if stop.requested and not isinstance(cause, TerminalError):
                return _finish(sink, config, stop)
            if isinstance(cause, TerminalError):
                log.error("%s", cause)
                return EXIT_CONFIG if isinstance(cause, ConfigError) else EXIT_FAILED
            reason = first_line(cause)
            if not policy.allow_restart():
                log.error(
                    "query failed: %s; restart strategy %r gives up",
                    reason,
                    config.job.restart.strategy,
                )
                return EXIT_FAILED
            metrics.restarts.inc()
            log.warning(
                "query failed: %s; %s in %.0fs", reason, policy.describe(), policy.delay
            )
            _sleep_unless_stopped(policy.delay, stop)
            if stop.requested:
                return EXIT_OK
        finally:
            for query in queries:
                if query.isActive:
                    query.stop()
            sink.close(timeout=0)


def _finish(sink: WalSink, config: Config, stop: GracefulStop) -> int:
    """The queries ended (drained, or stopped by SIGTERM): let the committer apply
    what is staged — all of it when draining, for up to ``job.stop_timeout`` on
    SIGTERM, nothing more after a second SIGTERM — then say how it ended."""
    started = time.monotonic()
    while not sink.drain(0.25):
        sink.check()
        waited = time.monotonic() - started
        if stop.now.is_set() or (stop.requested and waited > config.job.stop_timeout):
            log.warning(
                "stopped with %d staged batch(es) not yet applied; the next start "
                "applies them",
                sink.pending,
            )
            return EXIT_OK
    log.info("query finished: %s", "stopped" if stop.requested else "drained")
    return EXIT_OK


def _sleep_unless_stopped(seconds: float, stop: GracefulStop) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not stop.requested:
        time.sleep(min(0.2, deadline - time.monotonic()))
