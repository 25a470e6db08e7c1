"""Whether a target column holds every value of the stream's type as sent, pair by
pair (docs/merge.md, "Values MySQL would change"); value_fit.py decides by role.

MySQL changes some values on their way into a column narrower than the stream's
type, without an error even in strict mode, and mostly without a note either (seen
on MariaDB 10.11): a DECIMAL rounds extra decimals, DATETIME / TIMESTAMP / TIME(n)
drop fractions of a second, an integer column rounds a fraction, FLOAT keeps about
seven digits of a DOUBLE, a DOUBLE cannot hold every BIGINT, DATE drops the time of
a timestamp, CHAR drops trailing spaces, BINARY(n) pads with zero bytes and ENUM
takes a member of another case. A value that does not fit at all (an integer out of
range, a text too long, a character the character set lacks) is an error in strict
mode instead: its row is set aside like any row MySQL refuses, so none of those is
a narrowing here.

``column_fit`` compares one stream field with its column and returns ``None`` where
every value lands as sent, or a ``Narrowing``: what changes, and a test of which
values would (value_checks.py). Stream text into a number or time column is held to
the column's own form (``1.5`` for a DECIMAL(4,1), ``2001-01-01 00:00:00`` for a
DATETIME): MySQL reads other text as it can, ``'1.5'`` into an INT as 2.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal

import pyarrow as pa
import pyarrow.compute as pc

from wal_sink.mysql.target_profile import ColumnFacts
from wal_sink.mysql.value_checks import (
    Check,
    double_text,
    every_value,
    kept_null,
    multiple_of,
    per_value,
    reads_back,
    rounds_to,
    stored_as,
)

INTEGERS = frozenset({"tinyint", "smallint", "mediumint", "int", "integer", "bigint"})
TEXTS = frozenset(
    {"varchar", "tinytext", "text", "mediumtext", "longtext", "json", "char", "enum"}
)
BLOBS = frozenset({"varbinary", "tinyblob", "blob", "mediumblob", "longblob", "binary"})
SPARK_FSP = 6
"""Digits of a second Spark's timestamps have."""
DOUBLE_DIGITS = 15
"""Significant decimal digits every DOUBLE holds exactly."""
FLOAT_DIGITS = 6


@dataclass(frozen=True)
class Narrowing:
    """A column that may change some values of the stream's type."""

    column: str
    """The target column's name."""
    column_type: str
    """As the server shows it, e.g. ``decimal(12,2)``."""
    stream_type: str
    what: str
    """What the column does to such values, e.g. "rounds to 2 decimals"."""
    fix: str
    """A column type that holds them, or the cast that makes the stream fit."""
    check: Check | None
    """Which values change; None where the sink cannot tell (the column is then
    refused as a key and said at start, and its values are left to MySQL)."""
    key_safe: bool = False
    """Keys that become equal here were equal keys already (CHAR's trailing spaces
    under a PAD SPACE collation, as in a VARCHAR): no refusal as a key."""


def column_fit(kind: pa.DataType, facts: ColumnFacts) -> Narrowing | None:
    """What ``facts``' column does to values of stream type ``kind``; None where
    every value lands as sent (or fails with an error)."""
    column = _Column(facts)
    for rule in RULES:
        found = rule(kind, column)
        if found is not _NEXT:
            return found
    return column.narrowing(
        kind,
        "may convert values",
        f"a column of the stream's type ({stream_type_name(kind)})",
        None,
    )


SPARK_NAMES = {
    pa.int8(): "TINYINT",
    pa.int16(): "SMALLINT",
    pa.int32(): "INT",
    pa.int64(): "BIGINT",
    pa.float32(): "FLOAT",
    pa.float64(): "DOUBLE",
    pa.bool_(): "BOOLEAN",
    pa.string(): "STRING",
    pa.large_string(): "STRING",
    pa.binary(): "BINARY",
    pa.large_binary(): "BINARY",
    pa.date32(): "DATE",
}


def stream_type_name(kind: pa.DataType) -> str:
    """The stream's type as Spark names it (the WAL holds it as Arrow)."""
    if kind in SPARK_NAMES:
        return SPARK_NAMES[kind]
    if pa.types.is_decimal(kind):
        return f"DECIMAL({kind.precision},{kind.scale})"
    if pa.types.is_timestamp(kind):
        return "TIMESTAMP" if kind.tz else "TIMESTAMP_NTZ"
    return str(kind)


class _Column:
    """A column's type, parsed from information_schema's COLUMN_TYPE."""

    def __init__(self, facts: ColumnFacts) -> None:
        self.facts = facts
        self.type = facts.data_type
        found = re.match(r"^[a-z ]+\((.*)\)", facts.column_type, re.IGNORECASE)
        self.args = found.group(1) if found else ""

    def number(self, default: int, position: int = 0) -> int:
        parts = [p for p in self.args.split(",") if p.strip().isdigit()]
        return int(parts[position]) if len(parts) > position else default

    @property
    def scale(self) -> int | None:
        """The decimals a DECIMAL, FLOAT(M,D) or DOUBLE(M,D) keeps; None for a
        FLOAT or DOUBLE without them."""
        if self.type == "decimal":
            return self.number(0, 1)
        found = self.number(-1, 1) if self.args else -1
        return None if found < 0 else found

    @property
    def members(self) -> tuple[str, ...]:
        """An ENUM's members, as written."""
        return tuple(
            m.replace("''", "'") for m in re.findall(r"'((?:[^']|'')*)'", self.args)
        )

    @property
    def pads(self) -> bool:
        """Its collation ignores trailing spaces (PAD SPACE)."""
        name = self.facts.collation or ""
        return "nopad" not in name and "_0900_" not in name

    def narrowing(
        self, kind: pa.DataType, what: str, fix: str, check: Check | None, **kw
    ) -> Narrowing:
        return Narrowing(
            self.facts.name,
            self.facts.column_type,
            stream_type_name(kind),
            what,
            fix,
            check,
            **kw,
        )


_NEXT = object()
"""A rule that does not decide the pair."""


def _integers_and_booleans(kind: pa.DataType, col: _Column) -> object:
    if not (pa.types.is_integer(kind) or pa.types.is_boolean(kind)):
        return _NEXT
    if col.type in INTEGERS | {"decimal", "bit"} | TEXTS - {"enum"}:
        return None  # exact, or out of range: an error
    if col.type in ("float", "double") and not pa.types.is_boolean(kind):
        bits = 24 if col.type == "float" else 53
        if kind.bit_width < bits:
            return None
        return col.narrowing(
            kind,
            f"rounds integers beyond 2^{bits}",
            "BIGINT" if kind.bit_width == 64 else "DOUBLE",
            per_value(lambda v: stored_as(v, col.type) != v),
        )
    return _NEXT


def _floats(kind: pa.DataType, col: _Column) -> object:
    if not pa.types.is_floating(kind):
        return _NEXT
    if col.type == "double" and not col.args:
        return None
    if col.type == "float" and not col.args and kind.bit_width <= 32:
        return None
    changes = per_value(
        lambda v: not reads_back(Decimal(double_text(v)), col.type, col.scale)
    )
    if col.type in ("float", "double"):
        digits = "about seven digits" if col.type == "float" else "its digits"
        decimals = "" if col.scale is None else f" and {col.scale} decimals"
        return col.narrowing(kind, f"keeps {digits}{decimals}", "DOUBLE", changes)
    if col.type == "decimal":
        return col.narrowing(kind, f"rounds to {col.scale} decimals", "DOUBLE", changes)
    if col.type in INTEGERS:
        return col.narrowing(
            kind,
            "rounds fractions",
            "DOUBLE",
            per_value(lambda v: v != int(v)),
        )
    return _NEXT


def _decimals(kind: pa.DataType, col: _Column) -> object:
    if not pa.types.is_decimal(kind):
        return _NEXT
    fix = f"DECIMAL({max(kind.precision, 1)},{kind.scale})"
    if col.type == "decimal":
        scale = col.number(0, 1)
        if scale >= kind.scale:
            return None
        return col.narrowing(kind, f"rounds to {scale} decimals", fix, rounds_to(scale))
    if col.type in INTEGERS:
        if kind.scale == 0:
            return None
        return col.narrowing(kind, "rounds fractions", fix, rounds_to(0))
    if col.type in ("float", "double"):
        digits = FLOAT_DIGITS if col.type == "float" else DOUBLE_DIGITS
        if kind.precision <= digits and not col.args:
            return None
        return col.narrowing(
            kind,
            f"keeps about {digits + 1} digits",
            fix,
            per_value(lambda v: not reads_back(v, col.type, col.scale)),
        )
    if col.type in TEXTS - {"enum", "char"}:
        return None
    return _NEXT


def _timestamps(kind: pa.DataType, col: _Column) -> object:
    if not pa.types.is_timestamp(kind):
        return _NEXT
    per_second = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}[kind.unit]
    # Spark's timestamps are microseconds (an INT96 file reads as nanoseconds)
    digits = min(len(str(per_second)) - 1, SPARK_FSP)
    if col.type in ("datetime", "timestamp"):
        fsp = col.number(0)
        if fsp >= digits:
            return None
        step = per_second // 10**fsp
        return col.narrowing(
            kind,
            "drops fractions of a second" + (f" beyond {fsp} digits" if fsp else ""),
            f"{col.type.upper()}(6)",
            multiple_of(step),
        )
    if col.type == "date":
        return col.narrowing(
            kind,
            "drops the time of day",
            "DATETIME(6)",
            multiple_of(86_400 * per_second),
        )
    if col.type == "time":
        return col.narrowing(kind, "drops the date", "DATETIME(6)", every_value)
    return _NEXT


def _dates(kind: pa.DataType, col: _Column) -> object:
    if not pa.types.is_date(kind):
        return _NEXT
    if col.type in ("date", "datetime", "timestamp"):
        return None
    return _NEXT


def _texts(kind: pa.DataType, col: _Column) -> object:
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        return _NEXT
    if col.type in TEXTS - {"enum", "char"}:
        return None
    if col.type == "char":
        return col.narrowing(
            kind,
            "drops trailing spaces",
            f"VARCHAR({col.number(1)})",
            lambda values: pc.ends_with(values, " "),
            key_safe=col.pads,
        )
    if col.type == "enum":
        return col.narrowing(
            kind,
            "takes a member that differs in case or trailing spaces",
            "the stream's values as members, exactly",
            _other_member(col),
        )
    form = _text_form(col)
    if form is None:
        return _NEXT
    pattern, what = form
    return col.narrowing(
        kind,
        f"reads other text than {what} as it can",
        "the stream's type (cast the text in transform.sql)",
        lambda values: pc.invert(pc.match_substring_regex(values, pattern)),
    )


def _binaries(kind: pa.DataType, col: _Column) -> object:
    if not (pa.types.is_binary(kind) or pa.types.is_large_binary(kind)):
        return _NEXT
    if col.type in BLOBS - {"binary"}:
        return None
    if col.type == "binary":
        length = col.number(1)
        return col.narrowing(
            kind,
            f"pads shorter values with zero bytes to {length}",
            f"VARBINARY({length})",
            lambda values: pc.less(pc.binary_length(values), length),
        )
    return _NEXT


def _nested(kind: pa.DataType, col: _Column) -> object:
    """Written as JSON text: check_json_targets (row_screen.py) refuses other
    columns than JSON and text."""
    return None if pa.types.is_nested(kind) else _NEXT


RULES = (
    _integers_and_booleans,
    _floats,
    _decimals,
    _timestamps,
    _dates,
    _texts,
    _binaries,
    _nested,
)


def _other_member(col: _Column) -> Check:
    """Values an ENUM stores as another member: equal to one under its collation
    (trailing spaces, and case where it ignores case), not one exactly. A value
    equal to none is an error instead."""
    exact = pa.array(col.members, pa.string())
    ignores_case = not (col.facts.collation or "").endswith("_bin")

    def fold(values: pa.Array) -> pa.Array:
        trimmed = pc.utf8_rtrim(values, characters=" ")
        return pc.utf8_lower(trimmed) if ignores_case else trimmed

    folded = fold(exact)

    def check(values: pa.Array) -> pa.Array:
        values = values.cast(pa.string())
        other = pc.and_(
            pc.invert(pc.is_in(values, exact)), pc.is_in(fold(values), folded)
        )
        return kept_null(values, other)

    return check


def _text_form(col: _Column) -> tuple[str, str] | None:
    """The regular expression of the text a number or time column holds as it is,
    and its name; None for other columns."""
    sign_digits = r"-?(0|[1-9][0-9]*)"
    if col.type in INTEGERS:
        return f"^{sign_digits}$", "an integer"
    if col.type == "decimal":
        scale = col.number(0, 1)
        fraction = rf"(\.[0-9]{{1,{scale}}})?" if scale else ""
        return f"^{sign_digits}{fraction}$", f"a number of at most {scale} decimals"
    date = r"[0-9]{4}-[0-9]{2}-[0-9]{2}"
    if col.type == "date":
        return f"^{date}$", "a date"
    if col.type in ("datetime", "timestamp"):
        fsp = col.number(0)
        fraction = rf"(\.[0-9]{{1,{fsp}}})?" if fsp else ""
        return f"^{date} [0-9]{{2}}:[0-9]{{2}}:[0-9]{{2}}{fraction}$", "a date and time"
    return None
