"""What a Spark checkpoint says about batch ids, read through Hadoop's FileSystem so
any checkpointLocation Spark accepts (local, HDFS, object stores) works."""

from __future__ import annotations

from pyspark.sql import SparkSession


def last_planned_batch(spark: SparkSession, location: str) -> int | None:
    """Highest batch id in the checkpoint's offset log, or None for a new checkpoint.

    Spark writes offsets/N before running batch N and re-runs the last planned batch
    after a crash, so no batch staged by this checkpoint can be above this number.
    """
    jvm = spark.sparkContext._jvm
    offsets = jvm.org.apache.hadoop.fs.Path(location.rstrip("/") + "/offsets")
    fs = offsets.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    if not fs.exists(offsets):
        return None
    ids = [int(s.getPath().getName()) for s in fs.listStatus(offsets)
           if s.getPath().getName().isdigit()]
    return max(ids, default=None)
