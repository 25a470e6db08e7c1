"""The streaming DataFrame a job feeds to the sink: [source] read, then [transform].

Kafka values are parsed as JSON with the configured schema; file formats use it as
their schema; reader options pass through unchanged. The transform is Spark SQL over
the temporary view ``source``, with an optional event-time watermark set first.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from wal_sink.config import Config
from wal_sink.errors import ConfigError

SOURCE_VIEW = "source"


def read_source(spark: SparkSession, config: Config) -> DataFrame:
    src = config.source
    if src is None:
        raise ConfigError("config section [source] is missing; the job needs it")
    reader = spark.readStream.options(**{k: str(v) for k, v in src.options.items()})
    if src.format == "kafka":
        raw = reader.format("kafka").load()
        parsed = F.from_json(F.col("value").cast("string"), src.schema)
        return raw.select(parsed.alias("_value")).select("_value.*")
    if src.format == "rate":
        return reader.format("rate").load()
    reader = reader.format(src.format)
    if src.schema:
        reader = reader.schema(src.schema)
    return reader.load(config.resolve(src.path))


def streaming_frame(spark: SparkSession, config: Config) -> DataFrame:
    """Source plus transform: the rows each micro-batch hands to the sink."""
    df = read_source(spark, config)
    transform = config.transform
    if transform is None:
        return df
    if transform.watermark is not None:
        wm = transform.watermark
        if wm.expr:
            df = df.withColumn(wm.column, F.expr(wm.expr))
        df = df.withWatermark(wm.column, wm.delay)
    if not transform.sql:
        return df
    df.createOrReplaceTempView(SOURCE_VIEW)
    return spark.sql(transform.sql)
