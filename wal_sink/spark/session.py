"""The job's SparkSession: Spark's logging at the job's level from start to end
(log_level.py), and local paths written without Hadoop's checksum files.

Hadoop's default file system for ``file:`` paths writes a ``.crc`` file beside every
file it writes and reads it back with it; a streaming checkpoint's log entry is
written under a temporary name and renamed, so every trigger writes and renames
its offset and commit entries twice over. Nothing of the sink reads those
checksums (the committer, delta-rs and the CLI read the WAL with pyarrow; staging
counts only ``part-*`` files), and an entry renamed into place is never seen torn.
The raw local file system drops them, which shortens each trigger's offset log,
commit log and file listing (docs/benchmarks.md has the figures). Paths of any
other scheme (HDFS, S3A) are untouched.

A value given for the same key to spark-submit (``--conf``, spark-defaults.conf)
or in ``job.spark_conf`` wins: the defaults below fill only keys nobody set.
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark import SparkConf
from pyspark.sql import SparkSession

from wal_sink.spark.log_level import set_root_level

RAW_LOCAL_FILES = {
    "spark.hadoop.fs.file.impl": "org.apache.hadoop.fs.RawLocalFileSystem",
    "spark.hadoop.fs.AbstractFileSystem.file.impl": (
        "org.apache.hadoop.fs.local.RawLocalFs"
    ),
}
"""``file:`` without checksum files, for FileSystem (Spark's writes and listings)
and FileContext (the checkpoint's log entries)."""


def job_session(
    app_name: str, level: str, spark_conf: Mapping[str, str] | None = None
) -> SparkSession:
    """The job's SparkSession, with Spark logging at ``level`` from start to end
    and ``spark_conf`` (``job.spark_conf``) set before it starts, over the job's
    defaults."""
    set_root_level(level)  # also starts the gateway SparkConf needs
    submitted = SparkConf()
    builder = SparkSession.builder.appName(app_name)
    for key, value in RAW_LOCAL_FILES.items():
        if not submitted.contains(key):
            builder = builder.config(key, value)
    for key, value in (spark_conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(level)  # see log_level.py, step 2
    return spark
