"""Spark's commit log read from its files, without a JVM, so that ``wal-sink
recover`` holds I7 the other way round as the job does through Spark: a batch Spark
committed above everything the WAL and the ack table know was staged into a WAL that
is gone, and recovering "nothing" would hide that it is never applied.

Spark writes ``<checkpointLocation>/commits/N`` once the sink returned for batch N.
Local paths and S3 are read with pyarrow under the WAL's storage settings; a scheme
pyarrow cannot reach from here (HDFS without libhdfs, ...) leaves the check to the
job, with a warning.
"""

from __future__ import annotations

import logging

import pyarrow as pa

from wal_sink.config import Config
from wal_sink.errors import first_line
from wal_sink.wal.spark_checkpoint import last_committed_batch

log = logging.getLogger(__name__)


def committed_before_start(config: Config) -> tuple[str, int | None] | None:
    """The job's checkpoint and its newest committed batch, read BEFORE the lease
    and the WAL are: Spark commits a batch only once it is staged, so whatever the
    WAL holds when read afterwards covers it unless the WAL was lost. None when the
    config names no checkpoint or its log cannot be read here."""
    if config.job is None:
        return None
    checkpoint = config.job.checkpoint
    try:
        return checkpoint, last_committed_batch(config.storage, checkpoint)
    except (OSError, pa.ArrowException) as e:
        log.warning(
            "sink %s: cannot read Spark's commit log at %r (%s); the job checks it "
            "when it starts",
            config.sink.id,
            checkpoint,
            first_line(e),
        )
        return None
