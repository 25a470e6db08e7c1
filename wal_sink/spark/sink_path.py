"""What the job's supervisor (job.py) asks of the way an attempt stages and
applies."""

from __future__ import annotations

from typing import Protocol

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import DataStreamWriter, StreamingQuery

from wal_sink.protocol.stop_signal import StopSignal


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

    def fold_parse_errors(self, frame: DataFrame) -> bool:
        """Whether this path sets a parsed source's unparseable records aside in
        the sink's own batches (parse_errors.py), its query running over the raw
        source; else a parse-error query runs beside it."""

    def check(self) -> None:
        """Raise what stopped the applying side, if anything did."""

    def stop_between_batches(self, queries: list[StreamingQuery]) -> None:
        """SIGTERM (the stop signal says stop taking batches): let the batch in
        progress end, then stop the queries."""

    def finish(self, stop: StopSignal) -> int:
        """The queries ended: apply what is staged (see ``_finish``), exit code."""

    def cause(self, error: BaseException) -> BaseException:
        """What made the query fail, for the restart decision."""

    def close(self) -> None:
        """Release what the attempt holds; what is not applied stays staged."""
