"""A real streaming writer for crash tests: JSON landing files -> WalSink -> MySQL.

Usage: python writer_app.py CONFIG.toml LANDING_DIR

Recovers, then drains the landing directory one file per batch (availableNow) into
the sink, using [job].checkpoint. Each batch is spread over several tasks so the WAL
write takes long enough to be killed in the middle (WAL_SINK_FAULT=stage.during).
"""

import sys

from pyspark.sql import SparkSession

from wal_sink import WalSink

SCHEMA = "k STRING, amount DECIMAL(12,2), seq BIGINT"


def main(config_path: str, landing: str) -> None:
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("wal_sink crash writer")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    sink = WalSink.from_config(config_path)
    sink.recover(spark)
    query = (
        spark.readStream.schema(SCHEMA)
        .option("maxFilesPerTrigger", 1)
        .json(landing)
        .repartition(6)
        .writeStream.foreachBatch(sink.foreach_batch)
        .option("checkpointLocation", sink.config.job.checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    sink.close()
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:])
