"""``df.writeStream.format("wal_sink")``: the sink as a PySpark Python data source,
for classic Spark and Spark Connect alike.

    (df.writeStream.format("wal_sink")
       .option("config", "conf/NAME.toml")          # a path on the Spark driver
       .option("checkpointLocation", "var/checkpoints/NAME")
       .start())

PySpark finds it without a register call (``pyspark_wal_sink.DefaultSource``);
``spark.dataSource.register(WalSinkDataSource)`` works too. It only stages: each
batch lands in the WAL, and ``wal-sink follow`` (or the job, with ``job.writer =
"datasource"``) applies staged batches to MySQL behind it. The Spark side needs no
MySQL password.

Where each part runs: ``write`` on executors, once per task, writing the task's
rows (Arrow batches) as one Parquet file into the WAL (task_files.py); ``commit``
and ``abort`` on the driver, in a Python worker Spark starts for them, with every
task's commit message (stage_commit.py). Spark builds the ``DataSource`` that
commits once per run of the query, so the token it draws in ``__init__`` names the
run for fencing (writer_run.py); the writer that tasks use is built per batch.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from wal_sink.config import Config, load_config
from wal_sink.config.spelling import Spelling, spelled_config
from wal_sink.errors import ConfigError, TerminalError
from wal_sink.wal.task_files import TaskFile, wal_schema, write_task_file
from wal_sink.wal.writer_run import WriterRun

log = logging.getLogger(__name__)

NAME = "wal_sink"
BATCH_ID_PROPERTY = "streaming.sql.batchId"
"""The local property Spark's micro-batch execution gives every task of a batch."""


@dataclass(frozen=True)
class StagedTaskMessage(WriterCommitMessage):
    """One task's report to ``commit``: its file, if it had rows."""

    batch_id: int
    attempt: str
    partition: int
    task: TaskFile | None


class WalSinkDataSource(DataSource):
    """The ``wal_sink`` streaming sink; options ``config`` (required) and
    ``checkpointLocation``."""

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.run_token = uuid.uuid4().hex

    @classmethod
    def name(cls) -> str:
        return NAME

    def streamWriter(self, schema: StructType, overwrite: bool) -> WalStreamWriter:
        path = self.options.get("config")
        if not path:
            raise ConfigError(
                'format("wal_sink") needs .option("config", "path/to/sink.toml")'
            )
        arrow = wal_schema(to_arrow_schema(schema, timezone="UTC"))
        # cdc.order_by as the stream spells it: column names ignore case
        config = spelled_config(load_config(Path(path)), Spelling(arrow.names))
        order_by = config.cdc.order_by if config.cdc else None
        if order_by is not None and order_by not in arrow.names:
            raise ConfigError(
                f"cdc.order_by {order_by!r} is not a column of the stream"
            )
        return WalStreamWriter(
            config, arrow, self.run_token, self.options.get("checkpointLocation")
        )


class WalStreamWriter(DataSourceStreamArrowWriter):
    """Built on the driver per batch (for the tasks) and per commit; pickled to the
    executors with what they need."""

    def __init__(
        self,
        config: Config,
        schema: pa.Schema,
        run_token: str,
        checkpoint: str | None,
    ) -> None:
        self.config = config
        self.schema = schema
        self.run = WriterRun(config.sink.id, run_token)
        self.checkpoint = checkpoint
        self.attempt = uuid.uuid4().hex

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedTaskMessage:
        context = TaskContext.get()
        batch = context.getLocalProperty(BATCH_ID_PROPERTY) if context else None
        if batch is None:
            raise TerminalError(
                f"no micro-batch id in the task ({BATCH_ID_PROPERTY}): "
                'format("wal_sink") is a streaming sink; use writeStream',
                sink_id=self.config.sink.id,
            )
        batch_id, partition = int(batch), context.partitionId()
        task = write_task_file(
            self.config.wal_path,
            self.config.storage,
            batch_id,
            self.attempt,
            partition,
            iterator,
            self.schema,
            self.config.cdc.order_by if self.config.cdc else None,
        )
        return StagedTaskMessage(batch_id, self.attempt, partition, task)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        from wal_sink.protocol.stage_commit import StageCommitter

        started = time.monotonic()
        tasks = []
        for message in messages:
            if (
                not isinstance(message, StagedTaskMessage)
                or message.batch_id != batchId
            ):
                raise TerminalError(
                    f"a task reported {message!r} to the commit of this batch",
                    sink_id=self.config.sink.id,
                    batch_id=batchId,
                )
            if message.task is not None:
                tasks.append(message.task)
        outcome = StageCommitter(self.config, self.run, self.checkpoint).commit(
            batchId, tasks, self.schema
        )
        log.info(
            "batch %d staged: rows=%s files=%d stage_ms=%.0f pending=%d%s",
            batchId,
            outcome.rows if outcome.staged else "-",
            outcome.files,
            (time.monotonic() - started) * 1000,
            outcome.pending,
            "" if outcome.staged else " (already staged)",
        )

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """The batch failed: its files stay unreferenced until vacuum; Spark runs
        the batch again."""
        written = sum(
            1 for m in messages if isinstance(m, StagedTaskMessage) and m.task
        )
        log.warning(
            "sink %s batch %d aborted; %d written file(s) are left for vacuum",
            self.config.sink.id,
            batchId,
            written,
        )
