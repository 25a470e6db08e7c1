"""spark-submit app for bench.micro_batch_cost's baseline: the at-least-once job users
compare with. The same JSON files streamed one file per micro-batch, each batch
appended with ``df.write.jdbc`` (MariaDB Connector/J), ``--available-now`` style.

Usage: spark-submit bench/jdbc_append_app.py SOURCE SCHEMA CHECKPOINT URL TABLE
The password comes from WAL_SINK_MYSQL_PASSWORD, the user is ``sink``.
"""

import os
import sys

from pyspark.sql import SparkSession

if __name__ == "__main__":
    source, schema, checkpoint, url, table = sys.argv[1:6]
    spark = SparkSession.builder.appName("wal_sink bench: JDBC append").getOrCreate()
    properties = {
        "user": "sink",
        "password": os.environ["WAL_SINK_MYSQL_PASSWORD"],
        "driver": "org.mariadb.jdbc.Driver",
    }

    def append(df, batch_id):
        df.write.jdbc(url, table, mode="append", properties=properties)

    (
        spark.readStream.schema(schema)
        .option("maxFilesPerTrigger", 1)
        .json(source)
        .writeStream.foreachBatch(append)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
        .awaitTermination()
    )
    spark.stop()
