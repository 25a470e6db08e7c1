"""The streaming job's supervisor: source -> transform -> the sink's query (and, for
parsed sources, the parse-error query beside it), restarted by a strategy.

Each attempt goes through a SinkPath (sink_path.py): foreachBatch with the
committer thread behind it (foreach_batch_job.py) or ``format("wal_sink")`` with a
follower process (datasource_job.py). The path takes the lease, checks the
checkpoint and applies unacked batches (recovery) before the query starts from its
checkpoint. SIGTERM stops the query after the batch in progress and lets the path
apply what is staged (stop.py). Exit codes (exit_status.py): 0 done (drained, or
stopped), 1 failed (the restart strategy gave up, or a terminal error), 2
configuration error.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import DataStreamWriter, StreamingQuery

from wal_sink.config import Config
from wal_sink.durations import parse_duration
from wal_sink.errors import ConfigError, TerminalError, first_line
from wal_sink.exit_status import FAILED, OK, exit_code
from wal_sink.job.restart import RestartPolicy
from wal_sink.metrics import SinkMetrics
from wal_sink.protocol.recovery import check_checkpoint
from wal_sink.protocol.stop_signal import StopSignal
from wal_sink.spark.checkpoint import last_planned_batch
from wal_sink.spark.foreach_batch_job import ForeachBatchPath
from wal_sink.spark.parse_errors import ParseErrorRunner
from wal_sink.spark.sink_path import SinkPath
from wal_sink.spark.source import (
    CORRUPT_COLUMN,
    corrupt_records,
    read_source,
    streaming_frame,
)
from wal_sink.spark.stop import GracefulStop

log = logging.getLogger("wal_sink.job")

PARSE_CHECKPOINT_SUFFIX = "_parse_errors"
# The parse-error query triggers this many times less often than the sink's, taking
# that many times more input per trigger: its records are rare, and each trigger
# costs the driver a planning round and two checkpoint writes that would otherwise
# compete with the sink's own (a 100-row trigger: about 300 ms, as long as the
# sink's). With rate limits scaled alike it keeps up with the same stream.
PARSE_TRIGGER_FACTOR = 10


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
    while True:
        path: SinkPath
        if datasource:
            from wal_sink.spark.datasource_job import DataSourcePath

            path = DataSourcePath(config, config_path, stop)
        else:
            path = ForeachBatchPath(config, stop, metrics)
        queries: list[StreamingQuery] = []
        try:
            source = read_source(spark, config)
            frame = streaming_frame(spark, config, source)
            path.start(spark, frame)
            queries = start_queries(
                spark,
                config,
                path,
                config.job.checkpoint,
                available_now,
                frame,
                source,
            )
            while any(q.isActive for q in queries):
                for query in queries:
                    query.awaitTermination(0.25)  # raises if the query failed
                path.check()
                if stop.stopping:
                    path.stop_between_batches(queries)
            return path.finish(stop)
        except TerminalError as e:  # a configuration error included
            log.error("%s", e)
            return exit_code(e)
        except Exception as e:  # StreamingQueryException, TransientError, lost MySQL
            cause = path.cause(e)
            if stop.stopping and not isinstance(cause, TerminalError):
                return path.finish(stop)
            if isinstance(cause, TerminalError):
                log.error("%s", cause)
                return exit_code(cause)
            reason = first_line(cause)
            if not policy.allow_restart():
                log.error(
                    "query failed: %s; restart strategy %r gives up",
                    reason,
                    config.job.restart.strategy,
                )
                return FAILED
            metrics.restarts.inc()
            log.warning(
                "query failed: %s; %s in %.0fs", reason, policy.describe(), policy.delay
            )
            if stop.wait(policy.delay):  # SIGTERM while waiting to restart
                return OK
        finally:
            for query in queries:
                if query.isActive:
                    query.stop()
            path.close()
