"""spark-submit app for bench.end_to_end_ratio's first baseline: Spark's own JDBC
append (MariaDB Connector/J, at-least-once, no upsert) of the same JSON files, read
as one batch.

Usage: spark-submit bench/jdbc_batch_app.py SOURCE SCHEMA URL TABLE
The password comes from WAL_SINK_MYSQL_PASSWORD, the user is ``sink``.
"""

import os
import sys

from pyspark.sql import SparkSession

if __name__ == "__main__":
    source, schema, url, table = sys.argv[1:5]
    spark = SparkSession.builder.appName("wal_sink bench: JDBC batch").getOrCreate()
    spark.read.schema(schema).json(source).write.jdbc(
        url,
        table,
        mode="append",
        properties={
            "user": "sink",
            "password": os.environ["WAL_SINK_MYSQL_PASSWORD"],
            "driver": "org.mariadb.jdbc.Driver",
        },
    )
    spark.stop()
