"""Quarantine records read back as the rows they were: typed as the WAL's columns,
so a retry sends them down the committer's own path.

A record is JSON text (``record_json``): decimals, dates and times as text, bytes
as hex, nested values as JSON. Each value is read back as its WAL column's type;
nested values stay JSON text (the form the committer writes them in), and a column
the WAL no longer has takes the type of its JSON value; names match ignoring case (a
row a table set aside is spelt as the table spells its columns). A column the record
lacks is left out, never sent as NULL: it stays as the target holds it.
"""

from __future__ import annotations

import binascii
import json
from collections.abc import Iterable, Iterator
from datetime import date, datetime, time
from decimal import Decimal, InvalidOperation
from typing import Any

import pyarrow as pa

from wal_sink.wal.format import WAL_COLUMNS
from wal_sink.wal.reader import WalReader

TypedRow = tuple[pa.Schema, dict[str, Any]]
"""A row's schema and its values."""


class RecordTypeError(ValueError):
    """A record's value cannot be read back as its column's type (one line)."""


def wal_columns(wal: WalReader) -> dict[str, pa.DataType]:
    """The stream's columns in the WAL's schema, with their Arrow types (none while
    the WAL does not exist)."""
    table = wal.table()
    if table is None:
        return {}
    schema = pa.schema(table.schema().to_arrow())
    return {f.name: f.type for f in schema if f.name not in WAL_COLUMNS}


def typed_row(record: dict[str, Any], columns: dict[str, pa.DataType]) -> TypedRow:
    """The record's values as its columns' types, and the schema of the row.

    Raises:
        RecordTypeError: a value does not read back as its column's type.
    """
    fields, values = [], {}
    by_lower = {c.lower(): kind for c, kind in columns.items()}
    for name, value in record.items():
        # names ignore case (MySQL's do): a row a table set aside is spelt as it
        kind = columns.get(name, by_lower.get(name.lower()))
        if kind is None and not isinstance(value, (dict, list)):
            kind = pa.array([value]).type if value is not None else pa.null()
        elif kind is None or pa.types.is_nested(kind):
            kind = pa.string()
            value = _json_text(value)
        else:
            try:
                value = _value(value, kind)
            except (ValueError, TypeError, InvalidOperation, binascii.Error) as e:
                raise RecordTypeError(
                    f"its value of column {name!r} does not read back as {kind}: "
                    f"{type(e).__name__}"
                ) from None
        fields.append(pa.field(name, kind))
        values[name] = value
    return pa.schema(fields), values


def chunks(rows: Iterable[TypedRow], most: int) -> Iterator[pa.RecordBatch]:
    """Consecutive rows of one schema as record batches of at most ``most`` rows,
    in order."""
    held: list[dict[str, Any]] = []
    schema: pa.Schema | None = None
    for row_schema, values in rows:
        if held and (len(held) >= most or not row_schema.equals(schema)):
            yield pa.RecordBatch.from_pylist(held, schema=schema)
            held = []
        schema = row_schema
        held.append(values)
    if held:
        yield pa.RecordBatch.from_pylist(held, schema=schema)


def _json_text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value  # the committer's records hold nested values as JSON text
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _value(value: Any, kind: pa.DataType) -> Any:
    """``value`` as ``record_json`` wrote it, read back as ``kind``."""
    if value is None:
        return None
    if pa.types.is_boolean(kind):
        return _checked(value, bool)
    if pa.types.is_integer(kind):
        if isinstance(value, bool):
            raise TypeError("a boolean")
        return _checked(value, int)
    if pa.types.is_floating(kind):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"a {type(value).__name__}")
        return float(value)
    if pa.types.is_decimal(kind):
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise TypeError(f"a {type(value).__name__}")
        return Decimal(str(value))
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return _checked(value, str)
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        return bytes.fromhex(_checked(value, str))
    if pa.types.is_timestamp(kind):
        # Arrow takes a naive time (the driver path's, in UTC) as UTC in a zoned
        # column, and a zoned one at UTC in a naive column.
        return datetime.fromisoformat(_checked(value, str))
    if pa.types.is_date(kind):
        return date.fromisoformat(_checked(value, str))
    if pa.types.is_time(kind):
        return time.fromisoformat(_checked(value, str))
    raise TypeError(f"no reading of {kind}")


def _checked(value: Any, kind: type) -> Any:
    if not isinstance(value, kind):
        raise TypeError(f"a {type(value).__name__}")
    return value
