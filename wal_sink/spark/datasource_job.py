"""The Spark side of the job with ``job.writer = "datasource"``: its query stages
through ``format("wal_sink")``, and the follower process applies behind it (the
applying side, without Spark: job/follower_path.py)."""

from __future__ import annotations

import time

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import DataStreamWriter, StreamingQuery

from wal_sink.job.follower_path import FollowerPath
from wal_sink.protocol.sink_instance import SinkInstance
from wal_sink.protocol.stop_signal import drain_within
from wal_sink.spark.datasource import NAME
from wal_sink.spark.sink import check_stream

TRIGGER_POLL = 0.05
"""How often a stop looks whether the trigger in progress has ended."""


class DataSourcePath(FollowerPath):
    def start(self, spark: SparkSession, frame: DataFrame) -> None:
        instance = SinkInstance(self.config)  # no lease: the follower takes it
        try:
            check_stream(instance, frame.schema)
        finally:
            instance.close()
        self.start_follower()

    def attach(self, writer: DataStreamWriter) -> DataStreamWriter:
        return writer.format(NAME).option("config", self.config_path)

    def fold_parse_errors(self, frame: DataFrame) -> bool:
        return False  # the data source stages the query's rows as they come

    def stop_between_batches(self, queries: list[StreamingQuery]) -> None:
        """Let the trigger in progress end (for up to ``job.stop_timeout``, or
        until a second SIGTERM), then stop the queries: stopping one mid-batch
        interrupts Spark's tasks and Python workers, and the batch is run again at
        the next start (nothing is lost, but work is)."""
        drain_within(
            TriggersInProgress(queries),
            self.stop,
            lambda: self.config.job.stop_timeout,
            step=TRIGGER_POLL,
        )
        for query in queries:
            query.stop()


class TriggersInProgress:
    """The queries' triggers in progress, as ``drain_within`` waits for them."""

    def __init__(self, queries: list[StreamingQuery]) -> None:
        self.queries = queries

    @property
    def pending(self) -> int:
        return sum(q.isActive and q.status["isTriggerActive"] for q in self.queries)

    def check(self) -> None:
        pass

    def drain(self, timeout: float | None = None) -> bool:
        """Poll until no trigger is in progress, for up to ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.pending:
            if deadline is not None and time.monotonic() >= deadline:
                return False
            time.sleep(TRIGGER_POLL)
        return True
