"""Read Delta tables the way users query the WAL and the quarantine from Spark:
``spark.read.format("delta").load(path)``, with delta-spark's jars passed as
``spark.jars`` (no Ivy, no network).

    .venv-delta/bin/python tests/interop/read_with_delta_spark.py JAR_DIR OUT TABLE...

Runs under pyspark 4.2 with delta-spark 4.4 (``make venv-delta``), not the project's
own virtualenv. Writes OUT as JSON: for each table its schema (Spark's simple string)
and its rows, each value in a form that compares exactly across readers: timestamps
as microseconds since the epoch (TIMESTAMP_NTZ as if in UTC), dates as days since the
epoch, decimals as plain digits, floats as ``repr``, binary as hex.
"""

from __future__ import annotations

import json
import sys
from decimal import Decimal
from pathlib import Path

from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T


def comparable(name: str, kind: T.DataType) -> Column:
    column = F.col(f"`{name}`")
    if isinstance(kind, T.TimestampNTZType):
        return F.unix_micros(column.cast("timestamp"))  # session time zone is UTC
    if isinstance(kind, T.TimestampType):
        return F.unix_micros(column)
    if isinstance(kind, T.DateType):
        return F.unix_date(column)
    if isinstance(kind, T.BinaryType):
        return F.lower(F.hex(column))
    return column


def plain(value: object) -> object:
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, float):
        return repr(value)
    return value


def main(jar_dir: str, out: str, tables: list[str]) -> None:
    jars = sorted(str(j) for j in Path(jar_dir).glob("*.jar"))
    if not jars:
        sys.exit(f"no jars in {jar_dir}: run `make jars`")
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("read_with_delta_spark")
        .config("spark.jars", ",".join(jars))
        .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config(
            "spark.sql.catalog.spark_catalog",
            "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        )
        .config("spark.sql.session.timeZone", "UTC")
        # Delta's log replay at 50 partitions costs seconds per table here
        .config("spark.databricks.delta.snapshotPartitions", "2")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    result = {"spark": spark.version, "tables": {}}
    for table in tables:
        df = spark.read.format("delta").load(table)
        rows = df.select(
            *[comparable(f.name, f.dataType).alias(f.name) for f in df.schema.fields]
        ).collect()
        result["tables"][table] = {
            "schema": df.schema.simpleString(),
            "rows": [{k: plain(v) for k, v in r.asDict().items()} for r in rows],
        }
    Path(out).write_text(json.dumps(result))
    spark.stop()


if __name__ == "__main__":
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
