"""What a Spark checkpoint says about batch ids, read through Hadoop's FileSystem so
any checkpointLocation Spark accepts (local, HDFS, object stores) works; the one
read made every batch reads a local checkpoint without the JVM."""

from __future__ import annotations

import json
import os
from urllib.parse import urlsplit

from pyspark.sql import SparkSession


def _fs_path(spark: SparkSession, location: str):
    jvm = spark.sparkContext._jvm
    path = jvm.org.apache.hadoop.fs.Path(location)
    return path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()), path


def batch_timestamp_ms(spark: SparkSession, location: str, batch_id: int) -> int | None:
    """When Spark planned ``batch_id`` (batchTimestampMs of its offset log entry).

    Read once per batch: a local checkpoint is read by Python directly (through
    the JVM it took about 5 ms of every trigger), any other through Hadoop."""
    entry = f"{location.rstrip('/')}/offsets/{batch_id}"
    local = _local_path(entry)
    if local is not None:
        try:
            with open(local, encoding="utf-8") as f:
                f.readline()  # version line
                return json.loads(f.readline() or "{}").get("batchTimestampMs")
        except FileNotFoundError:
            return None
    fs, path = _fs_path(spark, entry)
    if not fs.exists(path):
        return None
    stream = fs.open(path)
    try:
        reader = spark.sparkContext._jvm.java.io.BufferedReader(
            spark.sparkContext._jvm.java.io.InputStreamReader(stream, "UTF-8")
        )
        reader.readLine()  # version line
        metadata = json.loads(reader.readLine() or "{}")
    finally:
        stream.close()
    return metadata.get("batchTimestampMs")


def _local_path(location: str) -> str | None:
    """The file system path of a ``file:`` or scheme-less location, else None."""
    parts = urlsplit(location)
    if parts.scheme == "file":
        return parts.path
    if parts.scheme == "":
        return os.path.abspath(location)
    return None


def last_planned_batch(spark: SparkSession, location: str) -> int | None:
    """Highest batch id in the checkpoint's offset log, or None for a new checkpoint.

    Spark writes offsets/N before running batch N and re-runs the last planned batch
    after a crash, so no batch staged by this checkpoint can be above this number.
    """
    return _newest(spark, location, "offsets")


def last_committed_batch(spark: SparkSession, location: str) -> int | None:
    """Highest batch id in the checkpoint's commit log, or None.

    Spark writes commits/N once ``foreachBatch`` returned for batch N, which the
    sink does only after staging it: every batch in it is one the WAL holds (its
    app transaction keeps the id even after a purge), unless the WAL was lost.
    """
    return _newest(spark, location, "commits")


def _newest(spark: SparkSession, location: str, log: str) -> int | None:
    fs, path = _fs_path(spark, f"{location.rstrip('/')}/{log}")
    if not fs.exists(path):
        return None
    ids = [
        int(s.getPath().getName())
        for s in fs.listStatus(path)
        if s.getPath().getName().isdigit()
    ]
    return max(ids, default=None)
