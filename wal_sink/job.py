"""The streaming job: source -> transform -> WalSink, restarted by a strategy.

Each attempt takes the lease, checks the checkpoint and applies unacked batches
(recovery) before the query starts from its checkpoint. For parsed sources (kafka,
json, csv) a second query beside it sends unparseable records to the quarantine.
SIGTERM stops the query after the batch in progress. Exit codes: 0 done (drained,
or stopped), 1 failed (the restart strategy gave up, or a terminal error), 2
configuration error.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable

from pyspark.java_gateway import ensure_callback_server_started
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from wal_sink.checkpoint import batch_timestamp_ms, last_planned_batch
from wal_sink.config import Config
from wal_sink.durations import parse_duration
from wal_sink.errors import ConfigError, TerminalError
from wal_sink.quarantine import Entry, Quarantine
from wal_sink.recovery import check_checkpoint
from wal_sink.restart import RestartPolicy
from wal_sink.sink import WalSink
from wal_sink.source import (
    CORRUPT_COLUMN,
    corrupt_records,
    read_source,
    streaming_frame,
)

log = logging.getLogger("wal_sink.job")

EXIT_OK, EXIT_FAILED, EXIT_CONFIG = 0, 1, 2
PARSE_STREAM = "parse"
PARSE_CHECKPOINT_SUFFIX = "_parse_errors"


class StopRequested(Exception):
    """A batch was about to start after SIGTERM; Spark will re-plan it next run."""


class GracefulStop:
    """SIGTERM sets ``requested``; the query is stopped between batches.

    Under spark-submit the driver JVM is the parent process and gets the signal too;
    its default handler would run the shutdown hooks and stop Spark mid-batch. The
    JVM's TERM handler is therefore replaced by one that only sets the flag.
    """

    def __init__(self) -> None:
        self.requested = False
        self.stopping = False
        self.batch_lock = threading.Lock()

    def install(self, spark: SparkSession) -> None:
        signal.signal(signal.SIGTERM, self._on_signal)
        gateway = spark.sparkContext._gateway
        ensure_callback_server_started(gateway)
        jvm = spark.sparkContext._jvm
        self._jvm_handler = _JvmTermHandler(self)  # keep a reference: py4j needs it
        jvm.sun.misc.Signal.handle(jvm.sun.misc.Signal("TERM"), self._jvm_handler)

    def _on_signal(self, signum: int, frame: object) -> None:
        self.requested = True


class _JvmTermHandler:
    """A ``sun.misc.SignalHandler`` implemented in Python through py4j."""

    def __init__(self, stop: GracefulStop) -> None:
        self.stop = stop

    def handle(self, sig: object) -> None:
        self.stop.requested = True

    class Java:
        implements = ["sun.misc.SignalHandler"]

    def stop_between_batches(self, query: StreamingQuery) -> None:
        with self.batch_lock:  # waits for the batch in progress
            self.stopping = True
        query.stop()


class BatchRunner:
    """The foreachBatch function: one batch through the sink, one log line."""

    def __init__(
        self, spark: SparkSession, sink: WalSink, stop: GracefulStop, checkpoint: str
    ) -> None:
        self.spark = spark
        self.sink = sink
        self.stop = stop
        self.checkpoint = checkpoint
        self.failure: BaseException | None = None

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        with self.stop.batch_lock:
            if self.stop.stopping:
                raise StopRequested()
            try:
                self.sink.foreach_batch(df, batch_id)
            except BaseException as e:
                self.failure = e
                raise
        report = self.sink.last_report
        planned = batch_timestamp_ms(self.spark, self.checkpoint, batch_id)
        lag = f"{time.time() * 1000 - planned:.0f}" if planned else "-"
        r = report.result
        log.info(
            "batch %d: rows=%d deleted=%d quarantined=%d stage_ms=%.0f "
            "commit_ms=%.0f lag_ms=%s%s",
            batch_id,
            r.rows,
            r.deleted,
            r.quarantined,
            report.stage_ms,
            report.commit_ms,
            lag,
            "" if r.applied else " (already applied)",
        )


class ParseErrorRunner:
    """foreachBatch of the parse-error stream: raw records into the quarantine.

    Only records Spark could not parse reach it, so collecting them is bounded by the
    garbage in the source, not by the batch size.
    """

    def __init__(self, config: Config) -> None:
        self.quarantine = Quarantine(
            config.quarantine_path,
            config.sink.id,
            stream=PARSE_STREAM,
            storage=config.storage,
        )
        self.reason = (
            f"could not parse as {config.source.format} with source.schema "
            "(parse-error stream batch {batch})"
        )

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        entries = [
            Entry({"raw": row[0]}, self.reason.format(batch=batch_id))
            for row in df.select(CORRUPT_COLUMN).collect()
        ]
        self.quarantine.record(batch_id, entries)
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
            processingTime=f"{parse_duration(config.job.trigger)} seconds"
        )
    return writer.start()


def start_queries(
    spark: SparkSession, config: Config, runner: BatchRunner, available_now: bool
) -> list[StreamingQuery]:
    """The sink's query and, for parsed formats, the parse-error query beside it."""
    name = f"wal_sink_{config.sink.id}".replace("-", "_").replace(".", "_")
    source = read_source(spark, config)
    queries = [
        start_query(
            streaming_frame(spark, config, source),
            name,
            runner,
            runner.checkpoint,
            config,
            available_now,
            config.job.output_mode,
        )
    ]
    corrupt = corrupt_records(source)
    if corrupt is not None:
        checkpoint = runner.checkpoint.rstrip("/") + PARSE_CHECKPOINT_SUFFIX
        side = ParseErrorRunner(config)
        check_checkpoint(
            config.sink.id,
            checkpoint,
            last_planned_batch(spark, checkpoint),
            side.quarantine.recorded_version(),
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
    checkpoint = config.resolve(config.job.checkpoint)
    stop = GracefulStop()
    stop.install(spark)
    policy = RestartPolicy(config.job.restart)
    while True:
        sink = WalSink(config)
        runner = BatchRunner(spark, sink, stop, checkpoint)
        queries: list[StreamingQuery] = []
        try:
            recovered = sink.recover(spark, checkpoint)
            if recovered:
                log.info(
                    "recovered %d batch(es) before starting: %s",
                    len(recovered),
                    [r.batch_id for r in recovered],
                )
            queries = start_queries(spark, config, runner, available_now)
            while any(q.isActive for q in queries):
                for query in queries:
                    query.awaitTermination(0.25)  # raises if the query failed
                if stop.requested and not stop.stopping:
                    log.info("SIGTERM: stopping after the current batch")
                    stop.stop_between_batches(queries[0])
                    for query in queries[1:]:
                        query.stop()
            log.info("query finished: %s", "stopped" if stop.requested else "drained")
            return EXIT_OK
        except ConfigError as e:
            log.error("%s", e)
            return EXIT_CONFIG
        except TerminalError as e:
            log.error("%s", e)
            return EXIT_FAILED
        except Exception as e:  # StreamingQueryException, TransientError, lost MySQL
            cause = runner.failure or e
            if stop.requested:
                log.info("stopped")
                return EXIT_OK
            if isinstance(cause, TerminalError):
                log.error("%s", cause)
                return EXIT_CONFIG if isinstance(cause, ConfigError) else EXIT_FAILED
            reason = (
                str(cause).strip().splitlines()[0]
                if str(cause).strip()
                else repr(cause)
            )
            if not policy.allow_restart():
                log.error(
                    "query failed: %s; restart strategy %r gives up",
                    reason,
                    config.job.restart.strategy,
                )
                return EXIT_FAILED
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
            sink.close()


def _sleep_unless_stopped(seconds: float, stop: GracefulStop) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not stop.requested:
        time.sleep(min(0.2, deadline - time.monotonic()))
