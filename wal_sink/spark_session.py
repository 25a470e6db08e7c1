"""A Spark session with Delta, for the commands that change the WAL and for jobs.

The Delta jars must already be on the driver's classpath at JVM launch (``make jars``
writes them into the virtualenv's spark-defaults.conf; clusters use --packages).
"""

from __future__ import annotations

from pyspark.sql import SparkSession

from wal_sink.errors import ConfigError
from wal_sink.spark_defaults import DELTA_SETTINGS

MISSING_DELTA = (
    "Delta Lake is not on Spark's classpath: run `make jars`, or start with "
    "--packages io.delta:delta-spark_4.2_2.13:4.4.0 (see README)"
)


def require_delta(spark: SparkSession) -> SparkSession:
    """Fail with one clear line when the Delta classes are missing."""
    try:
        spark.sparkContext._jvm.java.lang.Class.forName(
            "io.delta.sql.DeltaSparkSessionExtension",
            True,
            spark.sparkContext._jvm.Thread.currentThread().getContextClassLoader(),
        )
    except Exception:
        raise ConfigError(MISSING_DELTA) from None
    return spark


def local_session(app_name: str) -> SparkSession:
    """A small local session for operator commands (purge, vacuum)."""
    builder = (
        SparkSession.builder.master("local[2]")
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.databricks.delta.snapshotPartitions", "2")
    )
    for key, value in DELTA_SETTINGS.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return require_delta(spark)
