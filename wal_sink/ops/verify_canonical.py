"""The canonical text of a row, computed the same way inside MySQL (one SQL
expression) and over Arrow columns (pyarrow's kernels), so that a chunk's checksum
can be computed where its data is and two equal rows hash alike whatever their
spelling.

The target column's type decides a value's text, on both sides:

- integers as digits (a boolean as 1 or 0); DECIMAL by value: trailing zeros of the
  fraction dropped (1.50 and 1.5 are one text); FLOAT/DOUBLE as the server writes
  them;
- DATETIME and TIMESTAMP as the UTC instant ``YYYY-MM-DD HH:MM:SS.ffffff`` (the
  sink's sessions run at ``+00:00``; an Arrow timestamp in any zone is an instant);
  DATE as ``YYYY-MM-DD``;
- text as its collation compares it, near enough: lower-cased under a
  case-insensitive collation, without trailing spaces under a PAD SPACE one (a row
  these foldings still tell apart is asked to the server's own ``=``, verify_rows.py);
- JSON by value: the server's ``JSON_NORMALIZE``, and its spelling of the same value
  from Python (keys sorted, numbers as ``1.5E0``);
- binary as upper-case hex;
- NULL as NULL: each value is ``v`` and its text, or ``n``.

A row's text is its values' joined by U+001F; its hash the text's CRC-32 (as
pt-table-checksum's; half the cost of MD5 inside MySQL), which a chunk sums modulo
2**64 with its row count (MySQL: one query per chunk). Two rows that differ hash
alike once in 2**32.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

INTEGER, DECIMAL, FLOAT, DATETIME, DATE, TIME, TEXT, JSON_TEXT, BINARY = (
    "integer decimal float datetime date time text json binary".split()
)
KINDS = {
    **dict.fromkeys(
        ("tinyint", "smallint", "mediumint", "int", "integer", "bigint", "year"),
        INTEGER,
    ),
    **dict.fromkeys(("decimal", "numeric"), DECIMAL),
    **dict.fromkeys(("float", "double", "real"), FLOAT),
    **dict.fromkeys(("datetime", "timestamp"), DATETIME),
    "date": DATE,
    "time": TIME,
    "json": JSON_TEXT,
    **dict.fromkeys(
        ("binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"), BINARY
    ),
}
"""Target types by information_schema's DATA_TYPE; any other is TEXT."""
SEPARATOR = "\x1f"
MOD = 1 << 64
TRAILING_ZEROS = r"^(-?\d+)(?:\.0*|(\.\d*?[1-9])0*)$"


@dataclass(frozen=True)
class Canonical:
    """How one column's values are spelt for comparing."""

    name: str
    """The target's spelling of the column."""
    kind: str
    fold_case: bool = False
    """A case-insensitive collation: lower-cased."""
    pad: bool = False
    """A PAD SPACE collation: trailing spaces dropped."""
    collation: str | None = None


def canonical(
    name: str, data_type: str, collation: str | None, json: bool
) -> Canonical:
    """The spelling of a target column of ``data_type`` (lower case) and
    ``collation``; ``json``: MariaDB's JSON (LONGTEXT checked by json_valid)."""
    kind = JSON_TEXT if json else KINDS.get(data_type, TEXT)
    if kind != TEXT or collation is None:
        return Canonical(name, kind)
    return Canonical(
        name,
        TEXT,
        fold_case="_ci" in collation,
        pad="nopad" not in collation,
        collation=collation,
    )


# Inside MySQL.


def sql_text(c: Canonical, q: Callable[[str], str], alias: str = "") -> str:
    """The column's canonical text as a SQL expression (NULL for NULL)."""
    col = f"{alias}{q(c.name)}"
    if c.kind == DECIMAL:
        return f"TRIM(TRAILING '.' FROM TRIM(TRAILING '0' FROM CAST({col} AS CHAR)))"
    if c.kind == DATETIME:
        return f"DATE_FORMAT({col}, '%Y-%m-%d %H:%i:%s.%f')"
    if c.kind == DATE:
        return f"DATE_FORMAT({col}, '%Y-%m-%d')"
    if c.kind == TIME:
        return f"TIME_FORMAT({col}, '%H:%i:%s.%f')"
    if c.kind == JSON_TEXT:
        return f"JSON_NORMALIZE({col})"
    if c.kind == BINARY:
        return f"HEX({col})"
    if c.kind in (INTEGER, FLOAT):
        return f"CAST({col} AS CHAR)"
    text = f"CONVERT({col} USING utf8mb4)"
    if c.pad:
        text = f"TRIM(TRAILING ' ' FROM {text})"
    return f"LOWER({text})" if c.fold_case else text


def sql_row(columns: Sequence[Canonical], q: Callable[[str], str]) -> str:
    """The row's canonical text as a SQL expression."""
    values = ", ".join(f"IFNULL(CONCAT('v', {sql_text(c, q)}), 'n')" for c in columns)
    return f"CONCAT_WS(CHAR(31 USING utf8mb4), {values})"


def sql_hash(row_text: str) -> str:
    """The hash of a canonical text, as a SQL expression: its CRC-32."""
    return f"CRC32({row_text})"


# Over Arrow columns.


def arrow_text(c: Canonical, values: pa.Array) -> pa.Array:
    """The column's canonical texts (null for null)."""
    kind, t = c.kind, values.type
    if kind == JSON_TEXT:
        return pa.array([_json_text(v) for v in values.to_pylist()], pa.string())
    if kind == BINARY:
        return pa.array(
            [
                None if v is None else _bytes(v).hex().upper()
                for v in values.to_pylist()
            ],
            pa.string(),
        )
    if pa.types.is_boolean(t):
        values = values.cast(pa.int8())
    elif pa.types.is_timestamp(t):
        values = values.cast(pa.timestamp("us", t.tz), safe=False)
        values = values.cast(pa.timestamp("us"))  # an instant: its UTC wall clock
        if kind == DATE:
            values = values.cast(pa.date32())
    elif pa.types.is_time(t):
        values = values.cast(pa.time64("us"))
    text = values.cast(pa.string())
    if kind == DECIMAL or (kind == INTEGER and pa.types.is_decimal(t)):
        return pc.replace_substring_regex(text, TRAILING_ZEROS, r"\1\2")
    if kind == FLOAT:
        return pc.replace_substring(text, "e+", "e")
    if kind == TEXT:
        if c.pad:
            text = pc.utf8_rtrim(text, characters=" ")
        if c.fold_case:
            text = pc.utf8_lower(text)
    return text


def arrow_row(columns: Sequence[Canonical], table: pa.Table) -> pa.Array:
    """Each row's canonical text; ``table`` holds the columns by their names."""
    parts = [
        pc.fill_null(
            pc.binary_join_element_wise("v", arrow_text(c, _flat(table[c.name])), ""),
            "n",
        )
        for c in columns
    ]
    return pc.binary_join_element_wise(*parts, SEPARATOR)


def hashes(texts: pa.Array) -> np.ndarray:
    """Each text's hash (as sql_hash), as unsigned integers; read from the array's
    own buffers, without a Python string per row."""
    texts = texts.cast(pa.large_string())
    _, offsets, data = texts.buffers()
    at = np.frombuffer(offsets, np.int64)[texts.offset : texts.offset + len(texts) + 1]
    data = memoryview(data if data is not None else b"")
    bounds = at.tolist()
    return np.fromiter(
        (zlib.crc32(data[a:b]) for a, b in zip(bounds, bounds[1:])),
        dtype=np.uint64,
        count=len(texts),
    )


def _flat(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    if isinstance(column, pa.ChunkedArray):
        return column.combine_chunks()
    return column


def _bytes(value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()


def _json_text(value: Any) -> str | None:
    """MariaDB's JSON_NORMALIZE of a JSON text, or of a nested Arrow value."""
    if value is None:
        return None
    if isinstance(value, str):
        value = json.loads(value, parse_float=Decimal, parse_int=Decimal)
    return _normalized(value)


def _normalized(value: Any) -> str:
    if isinstance(value, dict):
        items = sorted((str(k), v) for k, v in value.items())
        return "{" + ",".join(f"{_string(k)}:{_normalized(v)}" for k, v in items) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_normalized(v) for v in value) + "]"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, Decimal)):
        return _number(Decimal(repr(value) if isinstance(value, float) else value))
    return _string(str(value))


def _number(d: Decimal) -> str:
    """A number as JSON_NORMALIZE writes it: ``-1.25E3``, zero as ``0.0E0``."""
    if d == 0:
        return "0.0E0"
    sign, digits, _ = d.normalize().as_tuple()
    text = "".join(map(str, digits))
    return f"{'-' if sign else ''}{text[0]}.{text[1:] or '0'}E{d.adjusted()}"


def _string(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)
