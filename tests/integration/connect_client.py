"""A Spark Connect client for the Connect tests, in a process of its own: it starts
the streaming query through ``format("wal_sink")`` on the server and waits on it.
(A Connect session in the test process would switch pyspark there, and in the
processes it starts, to Connect mode through the environment.)

Usage: python connect_client.py URL CONFIG LANDING CHECKPOINT processing|available-now

``processing``: a 1-second trigger, until the query or the server dies;
``available-now``: drain what is there, then exit 0.
"""

import sys

from pyspark.sql import SparkSession

SCHEMA = "k STRING, amount DECIMAL(12,2)"


def main(url: str, config: str, landing: str, checkpoint: str, mode: str) -> None:
    spark = SparkSession.builder.remote(url).getOrCreate()
    trigger = (
        {"availableNow": True}
        if mode == "available-now"
        else {"processingTime": "1 second"}
    )
    query = (
        spark.readStream.schema(SCHEMA)
        .option("maxFilesPerTrigger", 2)
        .json(landing)
        .writeStream.format("wal_sink")
        .option("config", config)
        .option("checkpointLocation", checkpoint)
        .trigger(**trigger)
        .start()
    )
    query.awaitTermination()


if __name__ == "__main__":
    main(*sys.argv[1:6])
