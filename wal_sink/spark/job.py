"""The streaming job's Spark side: the session's settings, the SIGTERM handlers
(stop.py), and each attempt's queries — source -> transform -> the sink's query
(and, for parsed sources, the parse-error query beside it) — which the supervisor
(job/supervisor.py) runs and restarts.

Each attempt goes through a SinkPath: foreachBatch with the committer thread behind
it (foreach_batch_job.py) or ``format("wal_sink")`` with a follower process
(datasource_job.py); SparkPath is what the queries ask of its Spark side.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import DataStreamWriter, StreamingQuery

from wal_sink.config import Config
from wal_sink.durations import parse_duration
from wal_sink.errors import ConfigError
from wal_sink.exit_status import OK
from wal_sink.job.restart import RestartPolicy
from wal_sink.job.sink_path import SinkPath
from wal_sink.job.supervisor import supervise
from wal_sink.metrics import SinkMetrics
from wal_sink.protocol.recovery import check_checkpoint
from wal_sink.protocol.sink_instance import SinkInstance
from wal_sink.protocol.stop_signal import StopSignal
from wal_sink.protocol.target_ddl import prepare_targets
from wal_sink.spark.checkpoint import last_planned_batch
from wal_sink.spark.foreach_batch_job import ForeachBatchPath
from wal_sink.spark.parse_errors import ParseErrorRunner
from wal_sink.spark.source import (
    CORRUPT_COLUMN,
    corrupt_records,
    read_source,
    streaming_frame,
)
from wal_sink.spark.stop import GracefulStop
from wal_sink.spark.stream_schema import arrow_schema

log = logging.getLogger("wal_sink.job")

PARSE_CHECKPOINT_SUFFIX = "_parse_errors"
# The parse-error query triggers this many times less often than the sink's, taking
# that many times more input per trigger: its records are rare, and each trigger
# costs the driver a planning round and two checkpoint writes that would otherwise
# compete with the sink's own (a 100-row trigger: about 300 ms, as long as the
# sink's). With rate limits scaled alike it keeps up with the same stream.
PARSE_TRIGGER_FACTOR = 10


class SparkPath(SinkPath, Protocol):
    """What an attempt's queries ask of its SinkPath's Spark side."""

    def start(self, spark: SparkSession, frame: DataFrame) -> None:
        """Before the query over ``frame`` starts: refuse a stream the target cannot
        take as configured (check_stream), then lease, checkpoint check and
        recovery."""

    def attach(self, writer: DataStreamWriter) -> DataStreamWriter:
        """The sink on the query's writer."""

    def fold_parse_errors(self, frame: DataFrame) -> bool:
        """Whether this path sets a parsed source's unparseable records aside in
        the sink's own batches (parse_errors.py), its query running over the raw
        source; else a parse-error query runs beside it."""

    def stop_between_batches(self, queries: list[StreamingQuery]) -> None:
        """SIGTERM (the stop signal says stop taking batches): let the batch in
        progress end, then stop the queries."""


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
    path: SparkPath,
    checkpoint: str,
    available_now: bool,
    frame: DataFrame,
    source: DataFrame,
) -> list[StreamingQuery]:
    """The sink's query over ``frame`` and, for parsed formats, the parse-error query
    beside it — unless ``path`` sets parse errors aside in the sink's own batches,
    whose query then runs over the raw ``source``."""
    name = f"wal_sink_{config.sink.id}".replace("-", "_").replace(".", "_")
    parsed = CORRUPT_COLUMN in source.columns
    folded = parsed and path.fold_parse_errors(frame)
    queries = [
        start_query(
            source if folded else frame,
            name,
            path.attach,
            checkpoint,
            config,
            available_now,
            config.job.output_mode,
        )
    ]
    corrupt = (
        None
        if folded
        else corrupt_records(read_source(spark, config, PARSE_TRIGGER_FACTOR))
    )
    if corrupt is None:
        return queries
    # The attempt's queries start together or not at all: the supervisor stops the
    # queries start_queries returned, and a sink query left running would meet the
    # next attempt's on the same checkpoint.
    try:
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
    except BaseException:
        queries[0].stop()
        raise
    return queries


class JobQueries:
    """One attempt's queries (Queries, job/sink_path.py): the source read, the
    sink's query through ``path`` and, for parsed sources, the parse-error query
    beside it."""

    def __init__(
        self, spark: SparkSession, config: Config, path: SparkPath, available_now: bool
    ) -> None:
        self.spark = spark
        self.config = config
        self.path = path
        self.available_now = available_now
        self.queries: list[StreamingQuery] = []

    def start(self) -> None:
        spark, config = self.spark, self.config
        source = read_source(spark, config)
        frame = streaming_frame(spark, config, source)
        self.path.start(spark, frame)
        self.queries = start_queries(
            spark,
            config,
            self.path,
            config.job.checkpoint,
            self.available_now,
            frame,
            source,
        )

    def running(self, seconds: float) -> bool:
        if not any(q.isActive for q in self.queries):
            return False
        for query in self.queries:
            query.awaitTermination(seconds)  # raises if the query failed
        return True

    def stop_between_batches(self) -> None:
        self.path.stop_between_batches(self.queries)

    def stop(self) -> None:
        for query in self.queries:
            if query.isActive:
                query.stop()


def print_ddl(config: Config, spark: SparkSession) -> int:
    """``--print-ddl``: the DDL the sink would run on its targets for this config's
    stream (the query's schema, which only Spark knows), printed; nothing is
    changed, whatever ``mysql.auto_*`` say."""
    frame = streaming_frame(spark, config, read_source(spark, config))
    schema = arrow_schema(frame.schema)
    instance = SinkInstance(config)
    try:
        plans = prepare_targets(instance.engine, config, schema, run=False)
        existing = [p.table for p in plans if p.create is None]
        fits = {f.table: f for f in instance.fits(schema) if f.table in existing}
    finally:
        instance.close()
    for plan in plans:
        statements = plan.statements or [f"-- table {plan.table}: nothing to do"]
        print(";\n".join(statements) + (";" if plan.statements else ""))
        fit = fits.get(plan.table)
        for warning in fit.warnings() if fit else ():
            print(f"-- {warning}")
    return OK


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
        if spark.conf.get(key, None) != value:  # job_session set it at the start
            spark.conf.set(key, value)
    config.storage.configure_spark(spark)  # S3A settings before any s3a:// access
    stop = StopSignal()
    GracefulStop(stop).install(spark)
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

    def attempt() -> tuple[SparkPath, JobQueries]:
        path: SparkPath
        if datasource:
            from wal_sink.spark.datasource_job import DataSourcePath

            path = DataSourcePath(config, config_path, stop)
        else:
            path = ForeachBatchPath(config, stop, metrics)
        return path, JobQueries(spark, config, path, available_now)

    return supervise(attempt, stop, policy, metrics)
