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
from typing import Protocol

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import DataStreamWriter, StreamingQuery

from wal_sink.config import Config
from wal_sink.durations import parse_duration
from wal_sink.errors import ConfigError, StopRequested, TerminalError, first_line
from wal_sink.metrics import SinkMetrics
from wal_sink.protocol.pipeline import Applied, describe
from wal_sink.protocol.recovery import check_checkpoint
from wal_sink.spark.checkpoint import last_planned_batch
from wal_sink.spark.restart import RestartPolicy
from wal_sink.spark.sink import WalSink, check_stream
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

    def __init__(self, sink: WalSink, stop: GracefulStop) -> None:
        self.sink = sink
        self.stop = stop
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
    log.info("%s", describe(applied))


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
    sink: Callable[[DataStreamWriter], DataStreamWriter],
    checkpoint: str,
    config: Config,
    available_now: bool,
    output_mode: str,
    trigger_factor: int = 1,
) -> StreamingQuery:
    writer = sink(
        df.writeStream.queryName(name)
        .outputMode(output_mode)
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
    path: SinkPath,
    checkpoint: str,
    available_now: bool,
    frame: DataFrame,
) -> list[StreamingQuery]:
    """The sink's query over ``frame`` and, for parsed formats, the parse-error query
    beside it."""
    name = f"wal_sink_{config.sink.id}".replace("-", "_").replace(".", "_")
    queries = [
        start_query(
            frame,
            name,
            path.attach,
            checkpoint,
            config,
            available_now,
            config.job.output_mode,
        )
    ]
    corrupt = corrupt_records(read_source(spark, config, PARSE_TRIGGER_FACTOR))
    if corrupt is not None:
        side_checkpoint = checkpoint.rstrip("/") + PARSE_CHECKPOINT_SUFFIX
        side = ParseErrorRunner(config)
        check_checkpoint(
            config.sink.id,
            side_checkpoint,
            last_planned_batch(spark, side_checkpoint),
            side.quarantine.version(side.app_id),
        )
        queries.append(
            start_query(
                corrupt,
                f"{name}_parse_errors",
                lambda w: w.foreachBatch(side),
                side_checkpoint,
                config,
                available_now,
                "append",
                PARSE_TRIGGER_FACTOR,
            )
        )
    return queries


class SinkPath(Protocol):
    """How one attempt of the job stages and applies: a committer thread behind
    foreachBatch (ForeachBatchPath), or format("wal_sink") and a follower process
    (datasource_job.DataSourcePath)."""

    def start(self, spark: SparkSession, frame: DataFrame) -> None:
        """Before the query over ``frame`` starts: refuse a stream the target cannot
        take as configured (check_stream), then lease, checkpoint check and
        recovery."""

    def attach(self, writer: DataStreamWriter) -> DataStreamWriter:
        """The sink on the query's writer."""

    def check(self) -> None:
        """Raise what stopped the applying side, if anything did."""

    def stop_taking_batches(self, queries: list[StreamingQuery]) -> None:
        """SIGTERM: no further batch is staged; the queries are stopped next."""

    def finish(self, stop: GracefulStop) -> int:
        """The queries ended: apply what is staged (see ``_finish``), exit code."""

    def cause(self, error: BaseException) -> BaseException:
        """What made the query fail, for the restart decision."""

    def close(self) -> None:
        """Release what the attempt holds; what is not applied stays staged."""


class ForeachBatchPath:
    """foreachBatch stages (BatchRunner), the sink's committer thread applies."""

    def __init__(
        self, config: Config, stop: GracefulStop, metrics: SinkMetrics
    ) -> None:
        self.config = config
        self.sink = WalSink(
            config, on_applied=log_applied, stop=stop.now, metrics=metrics
        )
        self.runner = BatchRunner(self.sink, stop)

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

    def attach(self, writer: DataStreamWriter) -> DataStreamWriter:
        return writer.foreachBatch(self.runner)

    def check(self) -> None:
        self.sink.check()  # a committer failure stops the job, even when idle

    def stop_taking_batches(self, queries: list[StreamingQuery]) -> None:
        self.sink.stop_taking_batches()

    def finish(self, stop: GracefulStop) -> int:
        """Let the committer apply what is staged — all of it when draining, for up
        to ``job.stop_timeout`` on SIGTERM, nothing more after a second SIGTERM —
        then say how it ended."""
        sink = self.sink
        started = time.monotonic()
        while not sink.drain(0.25):
            sink.check()
            waited = time.monotonic() - started
            if stop.now.is_set() or (
                stop.requested and waited > self.config.job.stop_timeout
            ):
                log.warning(
                    "stopped with %d staged batch(es) not yet applied; the next "
                    "start applies them",
                    sink.pending,
                )
                return EXIT_OK
        log.info("query finished: %s", "stopped" if stop.requested else "drained")
        return EXIT_OK

    def cause(self, error: BaseException) -> BaseException:
        return self.runner.failure or self.sink.failure or error

    def close(self) -> None:
        self.sink.close(timeout=0)


def run_job(
    config: Config,
    *,
    available_now: bool,
    spark: SparkSession | None = None,
    config_path: str | None = None,
) -> int:
    """Run until drained (``available_now``), stopped, or the strategy gives up.

    ``config_path``, the file ``config`` was read from, is needed with
    ``job.writer = "datasource"``: the data source and the follower read it.
    """
    if config.job is None:
        raise ConfigError("config section [job] is missing; the job needs it")
    spark = spark or (
        SparkSession.builder.appName(f"wal_sink {config.sink.id}").getOrCreate()
    )
    for key, value in config.job.spark_conf.items():
        spark.conf.set(key, value)
    config.storage.configure_spark(spark)  # S3A settings before any s3a:// access
    stop = GracefulStop()
    stop.install(spark)
    policy = RestartPolicy(config.job.restart)
    metrics = SinkMetrics(config.sink.id)
    datasource = config.job.writer == "datasource"
    if datasource and config_path is None:
        raise ConfigError('job.writer = "datasource" needs the config file\'s path')
    if config.job.metrics_port is not None and not datasource:  # else the follower
        metrics.serve(config.job.metrics_port, config.job.metrics_host)
        log.info(
            "metrics at http://%s:%d/metrics",
            config.job.metrics_host,
            config.job.metrics_port,
        )
    while True:
        path: SinkPath
        if datasource:
            from wal_sink.spark.datasource_job import DataSourcePath

            path = DataSourcePath(config, config_path, stop)
        else:
            path = ForeachBatchPath(config, stop, metrics)
        queries: list[StreamingQuery] = []
        try:
            frame = streaming_frame(spark, config, read_source(spark, config))
            path.start(spark, frame)
            queries = start_queries(
                spark, config, path, config.job.checkpoint, available_now, frame
            )
            while any(q.isActive for q in queries):
                for query in queries:
                    query.awaitTermination(0.25)  # raises if the query failed
                path.check()
                if stop.requested and not stop.stopping:
                    path.stop_taking_batches(queries)
                    stop.stop_between_batches(queries)
            return path.finish(stop)
        except ConfigError as e:
            log.error("%s", e)
            return EXIT_CONFIG
        except TerminalError as e:
            log.error("%s", e)
            return EXIT_FAILED
        except Exception as e:  # StreamingQueryException, TransientError, lost MySQL
            cause = path.cause(e)
            if stop.requested and not isinstance(cause, TerminalError):
                return path.finish(stop)
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
            path.close()


def _sleep_unless_stopped(seconds: float, stop: GracefulStop) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not stop.requested:
        time.sleep(min(0.2, deadline - time.monotonic()))
