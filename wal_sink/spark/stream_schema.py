"""The stream's Spark schema as the WAL holds it (Arrow), for the tables the sink
creates and evolves: the job's start maps Spark's types through it, so the job and
the follower (which reads the WAL's schema) create the same columns.

Types neither the WAL (Delta) nor MySQL can hold are refused here, at the job's
start, one line naming the column and a way out, whether or not the sink creates
tables: VARIANT, intervals (year-month, day-time, calendar), TIME, and NULL-typed
columns; a batch of them would otherwise fail when it is staged.
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.errors import PySparkException
from pyspark.sql.pandas.types import to_arrow_type
from pyspark.sql.types import (
    CalendarIntervalType,
    DataType,
    DayTimeIntervalType,
    NullType,
    StructType,
    VariantType,
    YearMonthIntervalType,
)

from wal_sink.errors import ConfigError

REFUSED = (
    (VariantType, "cast it to a STRING (to_json) in [transform]"),
    (
        (YearMonthIntervalType, DayTimeIntervalType, CalendarIntervalType),
        "no MySQL type holds every interval and the WAL cannot hold one; cast it "
        "in [transform], e.g. to a BIGINT of microseconds or a STRING",
    ),
    (NullType, "a column of NULLs has no type; CAST it to the type meant"),
)


def arrow_schema(schema: StructType) -> pa.Schema:
    """``schema`` as Arrow, timestamps in UTC as the WAL holds them.

    Raises:
        ConfigError: a column of a type the sink cannot stage or land.
    """
    fields = []
    for field in schema.fields:
        _refuse(field.name, field.dataType)
        try:
            kind = to_arrow_type(field.dataType, timezone="UTC")
        except (PySparkException, TypeError, AssertionError) as e:
            raise ConfigError(
                f"stream column {field.name!r} is {field.dataType.simpleString()}, "
                f"which the WAL cannot hold ({str(e).splitlines()[0][:120]}); cast "
                "it in [transform]"
            ) from None
        if pa.types.is_time(kind):
            raise ConfigError(
                f"stream column {field.name!r} is {field.dataType.simpleString()}, "
                "which the WAL cannot hold (Delta has no time of day); cast it to a "
                "STRING or a TIMESTAMP in [transform]"
            )
        fields.append(pa.field(field.name, kind, field.nullable))
    return pa.schema(fields)


def _refuse(name: str, kind: DataType) -> None:
    for refused, way_out in REFUSED:
        if isinstance(kind, refused):
            raise ConfigError(
                f"stream column {name!r} is {kind.simpleString()}, which the sink "
                f"cannot stage or land: {way_out}"
            )
