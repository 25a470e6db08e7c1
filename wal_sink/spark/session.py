"""The job's SparkSession: Spark's logging at the job's level from start to end
(log_level.py), ``job.spark_conf`` given as it starts, and a local checkpoint
written without Hadoop's checksum files.

Spark writes a streaming checkpoint's entries (the offset log, the commit log, the
file source's log of files seen) through Hadoop's FileContext, which for ``file:``
paths writes a ``.crc`` file beside each entry: every trigger writes and renames
two files for each of its three entries. The raw local FileContext writes the entry
alone; each entry is still written under a temporary name and renamed into place,
so a crash never leaves one torn, and nothing reads the checksums. That shortens
each trigger (docs/benchmarks.md has the figures). Checkpoints elsewhere (HDFS,
S3A) and Spark's other writes are untouched.

A value given for the same key to spark-submit (``--conf``, spark-defaults.conf)
or in ``job.spark_conf`` wins: the default fills only a key nobody set.
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark import SparkConf
from pyspark.sql import SparkSession

from wal_sink.spark.log_level import set_root_level

RAW_LOCAL_CHECKPOINT = (
    "spark.hadoop.fs.AbstractFileSystem.file.impl",
    "org.apache.hadoop.fs.local.RawLocalFs",
)
"""FileContext's ``file:`` without checksum files."""


def job_session(
    app_name: str, level: str, spark_conf: Mapping[str, str] | None = None
) -> SparkSession:
    """The job's SparkSession, with Spark logging at ``level`` from start to end
    and ``spark_conf`` (``job.spark_conf``) set before it starts, over the job's
    default."""
    set_root_level(level)  # also starts the gateway SparkConf needs
    builder = SparkSession.builder.appName(app_name)
    key, value = RAW_LOCAL_CHECKPOINT
    if not SparkConf().contains(key):
        builder = builder.config(key, value)
    for key, value in (spark_conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(level)  # see log_level.py, step 2
    return spark
