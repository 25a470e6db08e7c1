"""The streaming DataFrames a job runs: [source] read, then [transform].

Kafka values are parsed as JSON with the configured schema (with several tables,
each record's ``topic`` beside them); file formats use it as their schema; reader
options pass through unchanged. Records Spark cannot parse
(malformed, or a value of the wrong type) are not turned into rows of NULLs that an
upsert would write over good values: PERMISSIVE parsing keeps their raw text in
``_wal_corrupt``, and they leave the main stream for the quarantine. The transform is
Spark SQL over the temporary view ``source``, with an optional watermark set first.
"""

from __future__ import annotations

import re

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from wal_sink.config import Config
from wal_sink.errors import ConfigError

SOURCE_VIEW = "source"
CORRUPT_COLUMN = "_wal_corrupt"
PARSED_FORMATS = ("kafka", "json", "csv")
PERMISSIVE = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT_COLUMN}
RATE_LIMIT = re.compile(r"max\w*PerTrigger", re.IGNORECASE)
SCHEMA_INFERENCE = "spark.sql.streaming.schemaInference"
PATH_NOT_FOUND = "PATH_NOT_FOUND"
"""Spark's condition for a file source whose path does not exist, at ``load``."""
TOPIC = "topic"
"""Kafka's topic of each record: with several tables it reaches the transform (as
``topic``, unless the value has a field of that name), so a topic per table
routes by it."""


def read_source(spark: SparkSession, config: Config, rate_scale: int = 1) -> DataFrame:
    """The source as rows; parsed formats carry ``_wal_corrupt`` (raw text or NULL).
    A file source's path that does not exist is a configuration error (one line),
    for ``--print-ddl`` and the job's start alike, not a failure to restart.

    ``rate_scale`` multiplies the source's whole-number rate limits
    (``maxFilesPerTrigger``, ``maxOffsetsPerTrigger``, …) for a query that triggers
    that many times less often, so it keeps up with the same stream."""
    src = config.source
    if src is None:
        raise ConfigError("config section [source] is missing; the job needs it")
    options = scaled_rate_limits(src.reader_options(), rate_scale)
    reader = spark.readStream.options(**options)
    schema = (
        f"{src.schema}, {CORRUPT_COLUMN} STRING"
        if src.format in PARSED_FORMATS
        else src.schema
    )
    if src.format == "kafka":
        raw = reader.format("kafka").load()
        parsed = F.from_json(F.col("value").cast("string"), schema, PERMISSIVE)
        values = raw.select(parsed.alias("_value"), TOPIC)
        rows = values.select("_value.*")
        if config.mysql.route_column and TOPIC not in rows.columns:
            # several tables: a topic per table, as Debezium writes them
            return values.select("_value.*", TOPIC)
        return rows
    if src.format == "rate":
        return reader.format("rate").load()
    if not schema and not infers_schema(spark):
        raise ConfigError(
            f"source.schema is required for format {src.format!r}: Spark infers a "
            "streaming source's schema only with job.spark_conf "
            '{ "spark.sql.streaming.schemaInference" = "true" }'
        )
    reader = reader.format(src.format)
    if src.format in PARSED_FORMATS:
        reader = reader.options(**PERMISSIVE)  # after the user's: nothing is dropped
    if schema:
        reader = reader.schema(schema)
    try:
        return reader.load(src.path)
    except AnalysisException as e:
        if e.getCondition() != PATH_NOT_FOUND:
            raise
        raise ConfigError(
            f"source.path {src.path!r} does not exist: create it (the job reads the "
            f"{src.format} files that land there), or set source.path to where they "
            "land"
        ) from None


def infers_schema(spark: SparkSession) -> bool:
    """Whether Spark infers the schema of a streaming file source (off by default;
    without it and without a schema, the query fails at each attempt)."""
    return spark.conf.get(SCHEMA_INFERENCE, "false").strip().lower() == "true"


def scaled_rate_limits(options: dict[str, object], scale: int) -> dict[str, str]:
    """Reader options as text, whole-number ``max…PerTrigger`` limits times
    ``scale`` (others, such as ``maxBytesPerTrigger = "1g"``, as given)."""
    scaled = {key: str(value) for key, value in options.items()}
    for key, value in scaled.items():
        if RATE_LIMIT.fullmatch(key) and value.isdigit():
            scaled[key] = str(int(value) * scale)
    return scaled


def corrupt_records(source: DataFrame) -> DataFrame | None:
    """Records that could not be parsed (raw text in ``_wal_corrupt``), or None for
    other formats. All columns are kept: Spark refuses queries over raw JSON/CSV that
    read the corrupt-record column alone."""
    if CORRUPT_COLUMN not in source.columns:
        return None
    return source.where(F.col(CORRUPT_COLUMN).isNotNull())


def streaming_frame(
    spark: SparkSession, config: Config, source: DataFrame
) -> DataFrame:
    """Parsed source rows plus transform: what each micro-batch hands to the sink."""
    df = parsed_rows(source)
    transform = config.transform
    if transform is None:
        return df
    if transform.watermark is not None:
        wm = transform.watermark
        if wm.expr:
            df = df.withColumn(wm.column, F.expr(wm.expr))
        df = df.withWatermark(wm.column, wm.delay)
    return transformed(spark, config, df)


def parsed_rows(source: DataFrame) -> DataFrame:
    """The rows Spark could parse, without ``_wal_corrupt``."""
    if CORRUPT_COLUMN not in source.columns:
        return source
    # SQL text, not Columns: each Column is a JVM round trip, made every batch
    return source.where(f"{CORRUPT_COLUMN} IS NULL").drop(CORRUPT_COLUMN)


def transformed(spark: SparkSession, config: Config, df: DataFrame) -> DataFrame:
    """``[transform] sql`` over ``df`` as the view ``source`` in ``spark``."""
    transform = config.transform
    if transform is None or not transform.sql:
        return df
    df.createOrReplaceTempView(SOURCE_VIEW)
    return spark.sql(transform.sql)
