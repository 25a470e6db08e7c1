"""Rows MySQL cannot be sent, found in Arrow before they are, and struct, list and
map columns written as JSON text.

Two kinds of rows would otherwise stop a batch at every start, with no row to blame:

- text that is not UTF-8 (a Spark string can hold any bytes, e.g. a cast of binary)
  cannot be rendered for a utf8mb4 connection;
- a row whose statement is larger than the server's ``max_allowed_packet`` is not
  refused with an error: the server drops the connection, which looks like an
  outage and would be retried for the whole outage budget.

Each check returns the positions of the rows it finds, with a reason; the caller
sets them aside for the quarantine and applies the rest. Nested columns reach MySQL
as JSON text, so only a JSON or text column may receive them (``check_json_targets``,
at start and once per schema).
"""

from __future__ import annotations

import base64
import json
import math
from datetime import date, datetime, time
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from sqlalchemy import JSON, Enum, String, Table
from sqlalchemy.dialects.mysql import SET, TIMESTAMP

from wal_sink.errors import ConfigError

# A statement is its values plus the SQL around them: the column list, and each
# column's ON DUPLICATE KEY UPDATE clause naming it a few times (a version guard:
# seven names of up to 64 characters). Bounds, not exact counts.
STATEMENT_BYTES = 1024
COLUMN_BYTES = 600
SCALAR_BYTES = 48
"""The longest literal of a number, date or time (DECIMAL(38) with sign and point)."""
TEXT_EXTRA = 11
"""Quotes, a comma and the driver's ``_binary`` prefix around escaped text."""
NULL_BYTES = 5
MYSQL_ESCAPED = r"[\\\x00\n\r\x1a'\"]"
"""Characters MySQL's string literals escape: each takes one byte more."""
RECORD_CUT = 1000
"""Longest text or bytes value kept in the quarantine record of an oversized row."""
NOT_UTF8 = "text that is not UTF-8 in column(s)"
OVER_PACKET = "more than the server's max_allowed_packet"
CUT = f"values are cut to {RECORD_CUT} characters in this record"
"""Said by the reason of every record that holds less than its row."""


def is_nested(kind: pa.DataType) -> bool:
    return pa.types.is_nested(kind)


def check_json_targets(target: Table, nested: dict[str, str]) -> None:
    """Refuse (ConfigError, one line) a nested stream column whose target column is
    neither JSON nor text. ``nested`` maps stream columns to their type as text;
    columns the target lacks are left to the upsert's own check."""
    for name, kind in nested.items():
        if name not in target.c:
            continue
        column_type = target.c[name].type
        text = isinstance(column_type, String) and not isinstance(
            column_type, (Enum, SET)
        )
        if not (text or isinstance(column_type, JSON)):
            raise ConfigError(
                f"stream column {name!r} is {kind}, which the sink writes as JSON "
                f"text, but column {name!r} of table {target.name!r} is "
                f"{column_type}; make it a JSON or text column, or turn the value "
                "into a scalar in [transform]"
            )


def nested_columns(schema: pa.Schema) -> dict[str, str]:
    """Struct, list and map columns of ``schema``, with their type as text."""
    return {f.name: str(f.type) for f in schema if is_nested(f.type)}


def as_json_text(chunk: pa.RecordBatch) -> tuple[pa.RecordBatch, dict[int, str]]:
    """``chunk`` with each nested column replaced by its values' JSON text (NULL
    stays NULL), and the rows whose nested values hold text that is not UTF-8."""
    bad: dict[int, list[str]] = {}
    columns = []
    for field, column in zip(chunk.schema, chunk.columns):
        if not is_nested(field.type):
            columns.append(column)
            continue
        values = _python_values(column, field.name, bad)
        columns.append(
            pa.array([None if v is None else _json(v) for v in values], pa.string())
        )
    converted = pa.RecordBatch.from_arrays(columns, names=chunk.schema.names)
    return converted, _invalid_utf8_reasons(bad)


def invalid_utf8(chunk: pa.RecordBatch) -> dict[int, str]:
    """Rows holding text that is not UTF-8 in a string column."""
    bad: dict[int, list[str]] = {}
    for field, column in zip(chunk.schema, chunk.columns):
        if not (pa.types.is_string(field.type) or pa.types.is_large_string(field.type)):
            continue
        try:
            column.validate(full=True)  # in C++: rows are looked at only on failure
            continue
        except pa.ArrowInvalid:
            pass
        for i, raw in enumerate(_as_binary(column).to_pylist()):
            if raw is not None and not _is_utf8(raw):
                bad.setdefault(i, []).append(field.name)
    return _invalid_utf8_reasons(bad)


def oversized(
    chunk: pa.RecordBatch,
    key: tuple[str, ...],
    max_packet: int,
    deletes: pa.Array | None = None,
) -> dict[int, str]:
    """Rows whose statement would be larger than ``max_packet`` bytes, the server's
    ``max_allowed_packet`` (an upper bound of each row's statement: its escaped
    values and the SQL around them). ``deletes`` marks CDC deletes, which send
    their key only."""
    limit = max_packet - 1  # the packet's command byte
    names = chunk.schema.names
    if _chunk_bound(chunk) <= limit:
        return {}  # no row, not even the chunk's whole text, can pass the limit
    if pc.max(_statement_bytes(chunk, names)).as_py() <= limit:
        return {}  # even with every byte escaped: without a regex
    sizes = _statement_bytes(chunk, names, exact=True)
    if deletes is not None:
        key_sizes = _statement_bytes(chunk, list(key), exact=True)
        sizes = pc.if_else(pc.fill_null(deletes, False), key_sizes, sizes)
    over = pc.greater(sizes, limit)
    if not pc.any(over).as_py():
        return {}
    return {
        i: f"the row's statement would take up to {size} bytes, {OVER_PACKET} "
        f"({max_packet}); {CUT}, and the whole row stays in the "
        "WAL until its batch is purged (wal-sink inspect)"
        for i, (size, is_over) in enumerate(zip(sizes.to_pylist(), over.to_pylist()))
        if is_over
    }


def null_into_now(
    chunk: pa.RecordBatch,
    target: Table,
    deletes: pa.Array | None,
    kept: frozenset[str] = frozenset(),
) -> dict[int, str]:
    """Upserts with a NULL for a ``TIMESTAMP NOT NULL`` column of ``target``: MySQL
    with ``explicit_defaults_for_timestamp`` off, and MariaDB always, store the
    current time instead of refusing the NULL (a NULL version would then win every
    later comparison). Deletes (``deletes``) send their key only; the NULLs of
    ``kept`` columns keep a stored value (mysql.ignore_null_updates) and go by key,
    where a new key's is set aside (row_by_row.updating)."""
    columns = [
        name
        for name in chunk.schema.names
        if name in target.c
        and name not in kept
        and isinstance(target.c[name].type, TIMESTAMP)
        and not target.c[name].nullable
    ]
    if not columns:
        return {}
    found: dict[int, list[str]] = {}
    for name in columns:
        nulls = pc.is_null(chunk.column(name))
        if deletes is not None:
            nulls = pc.and_(nulls, pc.invert(pc.fill_null(deletes, False)))
        for i in pc.indices_nonzero(nulls).to_pylist():
            found.setdefault(i, []).append(name)
    return {
        i: f"NULL in TIMESTAMP NOT NULL column(s) {', '.join(names)}, which MySQL "
        "would store as the current time"
        for i, names in found.items()
    }


def record_is_partial(reason: str) -> bool:
    """Whether the quarantine record of a row set aside for ``reason`` holds less
    than the row: values cut (an oversized row) or bytes shown in hex (text that is
    not UTF-8). The whole row stays in the WAL until its batch is purged."""
    return reason.startswith(NOT_UTF8) or CUT in reason


def row_record(
    chunk: pa.RecordBatch, index: int, cut: int | None = None
) -> dict[str, Any]:
    """Row ``index`` as Python values for a quarantine record: text that is not
    UTF-8 as its bytes; with ``cut``, longer text and bytes cut to that length."""
    record: dict[str, Any] = {}
    for field, column in zip(chunk.schema, chunk.columns):
        try:
            value = column[index].as_py(maps_as_pydicts="lossy")
        except UnicodeDecodeError:
            value = _as_binary(column)[index].as_py()
        if cut is not None and isinstance(value, (str, bytes)) and len(value) > cut:
            value = value[:cut]
        record[field.name] = value
    return record


def _chunk_bound(chunk: pa.RecordBatch) -> int:
    """A bound of any row's statement from the size of the chunk's text buffers,
    without looking at a row: every byte of a column's text in one row, escaped."""
    bound = STATEMENT_BYTES + COLUMN_BYTES * chunk.num_columns
    for column in chunk.columns:
        kind = column.type
        if (
            pa.types.is_string(kind)
            or pa.types.is_large_string(kind)
            or (pa.types.is_binary(kind) or pa.types.is_large_binary(kind))
        ):
            data = column.buffers()[2]
            bound += 2 * (data.size if data is not None else 0) + TEXT_EXTRA
        else:
            bound += SCALAR_BYTES
    return bound


def _statement_bytes(
    chunk: pa.RecordBatch, names: list[str], exact: bool = False
) -> pa.Array:
    """Each row's statement size: at most, or (``exact``) with text's escapes
    counted rather than assumed on every byte."""
    total = pa.array(
        [STATEMENT_BYTES + COLUMN_BYTES * len(names)] * chunk.num_rows, pa.int64()
    )
    for name in names:
        column = chunk.column(name)
        kind = column.type
        if pa.types.is_string(kind) or pa.types.is_large_string(kind):
            column = _as_binary(column)
            kind = column.type
        if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
            length = pc.binary_length(column).cast(pa.int64())
            escapes = (
                pc.count_substring_regex(column, MYSQL_ESCAPED) if exact else length
            )
            width = pc.add(pc.add(length, escapes), TEXT_EXTRA)
        else:
            width = pa.array([SCALAR_BYTES] * chunk.num_rows, pa.int64())
        total = pc.add(total, pc.fill_null(width.cast(pa.int64()), NULL_BYTES))
    return total


def _python_values(column: pa.Array, name: str, bad: dict[int, list[str]]) -> list:
    """The column's values; a value holding text that is not UTF-8 becomes None
    and its row is noted in ``bad``."""
    try:
        return column.to_pylist(maps_as_pydicts="lossy")
    except UnicodeDecodeError:
        pass
    values = []
    for i in range(len(column)):
        try:
            values.append(column[i].as_py(maps_as_pydicts="lossy"))
        except UnicodeDecodeError:
            values.append(None)
            bad.setdefault(i, []).append(name)
    return values


def _invalid_utf8_reasons(bad: dict[int, list[str]]) -> dict[int, str]:
    return {
        i: f"{NOT_UTF8} {', '.join(names)} (its bytes are shown in hex); MySQL's "
        "utf8mb4 cannot store it"
        for i, names in bad.items()
    }


def _as_binary(column: pa.Array) -> pa.Array:
    """The same bytes as binary, unchecked (a cast would validate UTF-8)."""
    large = pa.types.is_large_string(column.type)
    return column.view(pa.large_binary() if large else pa.binary())


def _is_utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _json(value: Any) -> str:
    """JSON text of a nested value as Spark's ``to_json`` writes it: decimals as
    exact numbers, times in ISO 8601, bytes in base64, NaN and infinities as
    strings."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isfinite(value):
            return repr(value)
        if math.isnan(value):
            return '"NaN"'
        return '"Infinity"' if value > 0 else '"-Infinity"'
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, bytes):
        return json.dumps(base64.b64encode(value).decode("ascii"))
    if isinstance(value, (datetime, date, time)):
        return json.dumps(value.isoformat())
    if isinstance(value, dict):
        items = (
            f"{json.dumps(str(k), ensure_ascii=False)}:{_json(v)}"
            for k, v in value.items()
        )
        return "{" + ",".join(items) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_json(v) for v in value) + "]"
    return json.dumps(str(value), ensure_ascii=False)
