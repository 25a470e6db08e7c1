"""spark-submit app for bench.end_to_end_ratio's second baseline: the hand-written
at-least-once upsert users write without a sink. The same JSON files streamed
PER_TRIGGER files per micro-batch, ``--available-now`` style; each batch's
partitions upsert their rows with PyMySQL ``executemany`` of ``INSERT … ON
DUPLICATE KEY UPDATE`` (PyMySQL sends them as multi-row statements), one
transaction per partition and chunk of rows, no ack: a crash re-applies a batch.

Usage: spark-submit bench/upsert_app.py SOURCE SCHEMA CHECKPOINT PORT TABLE
                                        PER_TRIGGER
The password comes from WAL_SINK_MYSQL_PASSWORD, the user is ``sink``, the
database ``bench``.
"""

import os
import sys

from pyspark.sql import SparkSession

CHUNK_ROWS = 10_000

if __name__ == "__main__":
    source, schema, checkpoint, port, table, per_trigger = sys.argv[1:7]
    spark = SparkSession.builder.appName("wal_sink bench: upsert").getOrCreate()
    password = os.environ["WAL_SINK_MYSQL_PASSWORD"]

    def upsert_statement(columns):
        """The key is the first column."""
        return (
            f"INSERT INTO {table} ({', '.join(columns)}) VALUES "
            f"({', '.join(['%s'] * len(columns))}) ON DUPLICATE KEY UPDATE "
            + ", ".join(f"{c} = VALUES({c})" for c in columns[1:])
        )

    def upsert_partition(rows, statement):
        import pymysql

        conn = pymysql.connect(
            host="127.0.0.1",
            port=int(port),
            user="sink",
            password=password,
            database="bench",
        )
        try:
            chunk = []
            for row in rows:
                chunk.append(tuple(row))
                if len(chunk) == CHUNK_ROWS:
                    with conn.cursor() as cur:
                        cur.executemany(statement, chunk)
                    conn.commit()
                    chunk = []
            if chunk:
                with conn.cursor() as cur:
                    cur.executemany(statement, chunk)
                conn.commit()
        finally:
            conn.close()

    def upsert(df, batch_id):
        statement = upsert_statement(df.columns)
        df.foreachPartition(lambda rows: upsert_partition(rows, statement))

    (
        spark.readStream.schema(schema)
        .option("maxFilesPerTrigger", int(per_trigger))
        .json(source)
        .writeStream.foreachBatch(upsert)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
        .awaitTermination()
    )
    spark.stop()
