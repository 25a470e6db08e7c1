"""spark-submit app for bench.driver_memory's reference run: Spark alone reading
the same Parquet input and writing it out as plain Parquet, no sink.

Usage: spark-submit bench/copy_parquet_app.py SOURCE TARGET
"""

import sys

from pyspark.sql import SparkSession

if __name__ == "__main__":
    spark = SparkSession.builder.appName(
        "wal_sink bench: plain Parquet copy"
    ).getOrCreate()
    spark.read.parquet(sys.argv[1]).write.mode("overwrite").parquet(sys.argv[2])
    spark.stop()
