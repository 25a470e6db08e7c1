"""The MySQL type of each stream column, for the tables the sink creates and the
columns it adds (``mysql.auto_create``, ``mysql.auto_evolve``): a type that holds
every value of the column exactly, or a refusal naming the column (docs/merge.md,
"Tables the sink creates").

Mapped from the column's Arrow type, which is what the WAL holds (the job converts
Spark's schema the same way, so the job and the follower map alike):

- integers to the integer type of their width, floats to FLOAT / DOUBLE, decimals to
  DECIMAL(p, s), booleans to BOOLEAN;
- text to utf8mb4 text with a binary, NO PAD collation (Spark's ``'a'``, ``'A'`` and
  ``'a '`` are three values, and three keys): LONGTEXT, or for a key column a
  VARCHAR as long as InnoDB can index (its 3072 bytes, less what the key's other
  columns take, shared by the key's text columns);
  bytes to LONGBLOB, or VARBINARY for a key;
- dates to DATE, timestamps (with or without a zone) to DATETIME(6): to the
  microsecond whatever the session's time zone, and past 2038 (TIMESTAMP ends there);
- structs, lists and maps to LONGTEXT holding JSON text, which keeps decimals exact
  (MySQL 8's JSON type would turn them into doubles).

Refused, each with a way out: intervals (Spark's DAY TO SECOND arrives as a duration;
no MySQL type holds its range, and the WAL cannot hold it either), time of day and
other types the WAL cannot hold, and columns of NULLs without a type. A single value
MySQL cannot take (NaN, a date before year 1000 on MySQL, a key longer than its
column) is set aside row by row, as any value MySQL refuses.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NoReturn

import pyarrow as pa

from wal_sink.errors import ConfigError

KEY_BYTES = 3072
"""InnoDB's longest index key (DYNAMIC and COMPRESSED rows)."""
UTF8MB4_BYTES = 4
DECIMAL_DIGIT_BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)
"""How MySQL stores a DECIMAL: four bytes per nine digits of each side of the
point, and these for the digits left over."""


@dataclass(frozen=True)
class Dialect:
    """What differs between the servers in the types the sink writes."""

    mariadb: bool

    @property
    def text_collation(self) -> str:
        """utf8mb4, binary and NO PAD: trailing spaces count, as in Spark."""
        return "utf8mb4_nopad_bin" if self.mariadb else "utf8mb4_0900_bin"


INTEGERS = {
    pa.int8(): "TINYINT",
    pa.int16(): "SMALLINT",
    pa.int32(): "INT",
    pa.int64(): "BIGINT",
    pa.uint8(): "TINYINT UNSIGNED",
    pa.uint16(): "SMALLINT UNSIGNED",
    pa.uint32(): "INT UNSIGNED",
    pa.uint64(): "BIGINT UNSIGNED",
}


def mysql_type(
    field: pa.Field, dialect: Dialect, *, key: bool = False, key_bytes: int = KEY_BYTES
) -> str:
    """The column type (without NULL-ness) that holds every value of ``field``;
    ``key_bytes`` is what a text or binary key column may take of InnoDB's key
    length (``text_key_bytes``).

    Raises:
        ConfigError: no MySQL type holds the column's values, naming it.
    """
    kind = field.type
    if kind in INTEGERS:
        return INTEGERS[kind]
    if pa.types.is_float32(kind):
        return "FLOAT"
    if pa.types.is_float64(kind):
        return "DOUBLE"
    if pa.types.is_decimal(kind):
        if kind.precision > 65:
            _refuse(field, "MySQL's DECIMAL ends at 65 digits", "cast it to a STRING")
        return f"DECIMAL({kind.precision},{kind.scale})"
    if pa.types.is_boolean(kind):
        return "BOOLEAN"
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        text = f"VARCHAR({key_bytes // UTF8MB4_BYTES})" if key else "LONGTEXT"
        return f"{text} CHARACTER SET utf8mb4 COLLATE {dialect.text_collation}"
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        return f"VARBINARY({key_bytes})" if key else "LONGBLOB"
    if pa.types.is_date(kind):
        return "DATE"
    if pa.types.is_timestamp(kind):
        return "DATETIME(6)"
    if pa.types.is_nested(kind):
        if key:
            _refuse(field, "a key column cannot hold JSON text", "key on scalars")
        return f"LONGTEXT CHARACTER SET utf8mb4 COLLATE {dialect.text_collation}"
    if pa.types.is_duration(kind) or pa.types.is_interval(kind):
        _refuse(
            field,
            "no MySQL type holds every interval (TIME ends at 838:59:59), and the "
            "WAL cannot hold one",
            "cast it in [transform], e.g. to a BIGINT of microseconds",
        )
    if pa.types.is_null(kind):
        _refuse(field, "a column of NULLs has no type", "CAST it to the type meant")
    _refuse(
        field,
        "the WAL and MySQL have no type for it",
        "cast it in [transform] to a string or a number",
    )


def text_key_bytes(key: Sequence[pa.Field]) -> int:
    """What each text or binary column of a key of ``key``'s columns may take of
    InnoDB's KEY_BYTES: an equal share of what the other columns leave, as the
    index stores the types ``mysql_type`` gives them."""
    texts = [f for f in key if _is_text(f.type)]
    others = sum(_index_bytes(f.type) for f in key if not _is_text(f.type))
    return (KEY_BYTES - others) // max(len(texts), 1)


def _is_text(kind: pa.DataType) -> bool:
    """Text or bytes: a VARCHAR or VARBINARY in a key."""
    return any(
        check(kind)
        for check in (
            pa.types.is_string,
            pa.types.is_large_string,
            pa.types.is_binary,
            pa.types.is_large_binary,
        )
    )


def _index_bytes(kind: pa.DataType) -> int:
    """The bytes a key column of ``mysql_type``'s type for ``kind`` (not text)
    takes in an InnoDB index; 0 for a type no key column can have."""
    if kind in INTEGERS or pa.types.is_floating(kind):
        return kind.bit_width // 8
    if pa.types.is_decimal(kind):
        return sum(
            digits // 9 * 4 + DECIMAL_DIGIT_BYTES[digits % 9]
            for digits in (kind.precision - kind.scale, kind.scale)
        )
    if pa.types.is_boolean(kind):
        return 1
    if pa.types.is_date(kind):
        return 3
    if pa.types.is_timestamp(kind):
        return 8  # DATETIME(6)
    return 0


def _refuse(field: pa.Field, why: str, way_out: str) -> NoReturn:
    raise ConfigError(
        f"stream column {field.name!r} is {field.type}, which the sink cannot create "
        f"a column for: {why}; {way_out}"
    )
