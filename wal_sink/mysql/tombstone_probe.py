"""Which upserts of a CDC chunk a delete makes stale: one locking read per chunk,
inside the batch's transaction (tombstones.py says why tombstones exist).

The chunk's ops, versions and keys go to the server as one JSON document, typed by
``JSON_TABLE`` as the tombstone table's columns, which are the target's own: keys
match as the target's key does (collations, trailing spaces), versions compare as
the target's version column. A window over the chunk, partitioned by key in staged
order, finds the newest delete earlier in the chunk; a join with the tombstone
table, read with locks, the newest recorded before — by any sink writing the
target (tombstones.py); with truncates, a join with the truncate table the
table's newest truncate (truncates.py). An upsert whose version is not newer than
any of them is stale.

MySQL converts a value that does not fit the column's type with a warning (a clipped
number, a cut string) where an insert in strict mode fails. Rows whose values warn
are found by bisecting and left out of the decision: their own statements set them
aside, so a bad row is never dropped as stale, nor makes another row stale. A
``TIMESTAMP`` column is read as ``DATETIME`` (as the session sees it, in UTC), which
holds times past TIMESTAMP's range without a warning: those are found in Python.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date, datetime, time, timezone
from decimal import Decimal
from functools import partial
from typing import Any

from sqlalchemy import Connection, text

from wal_sink.errors import ConfigError
from wal_sink.mysql.identifiers import quoted
from wal_sink.mysql.tombstones import DELETED_AT, VERSION, Tombstones
from wal_sink.mysql.truncates import TABLE as TRUNCATED_TABLE
from wal_sink.mysql.truncates import VERSION as TRUNCATED_VERSION

PLAIN_TYPES = frozenset(
    {"tinyint", "smallint", "mediumint", "int", "bigint", "decimal", "float"}
    | {"double", "date", "datetime", "timestamp", "time", "year"}
)
COLUMN_TYPE = re.compile(r"^[a-z]+(\(\d+(,\d+)?\))?( unsigned)?( zerofill)?$")
NAME = re.compile(r"^\w+$")
# As the multi-row upserts (multi_row.py): about 1 MB a read.
DOCUMENT_BYTES = 1_024_000
TIMESTAMP_RANGE = (
    datetime(1970, 1, 1, 0, 0, 1),
    datetime(2038, 1, 19, 3, 14, 7, 999999),
)
"""What a TIMESTAMP column holds, in UTC."""
Encode = Callable[[Any], Any]


@dataclass(frozen=True)
class Document:
    """What one read sends: an element per row, and their JSON text."""

    elements: list[list[Any]]
    text: str
    outside: dict[int, str]
    """Rows (by position) whose key or version is past a TIMESTAMP's range."""


class StaleProbe:
    """The stale-upsert read for one tombstone table, built once."""

    def __init__(
        self, conn: Connection, tombstones: Tombstones, truncates: str | None = None
    ) -> None:
        """``truncates``: the target's truncate table (truncates.py), whose
        tombstone makes every upsert at or below it stale as well."""
        self.key = tombstones.key
        self.target = tombstones.target
        self.version = tombstones.version
        quote = partial(quoted, conn.dialect)
        columns = _column_types(conn, tombstones.name)
        declared, exprs, self._encoders = [], [], []
        self._timestamps = [
            field
            for field, name in zip([self.version, *self.key], [VERSION, *self.key])
            if columns[name.lower()][0].lower() == "timestamp"
        ]
        """The row's fields a TIMESTAMP column holds."""
        for i, name in enumerate([VERSION, *self.key]):
            declaration, expr, encode = _declare(name, *columns[name.lower()])
            declared.append(f"c{i} {declaration} PATH '$[{i + 1}]'")
            exprs.append(expr.format(f"j.c{i}") + f" AS c{i}")
            self._encoders.append(encode)
        keys = [f"s.c{i}" for i in range(1, len(self.key) + 1)]
        on = " AND ".join(f"tb.{quote(k)} = {c}" for k, c in zip(self.key, keys))
        partition = ", ".join(e.rsplit(" AS ", 1)[0] for e in exprs[1:])
        self.sql = text(
            "SELECT s.n FROM (SELECT j.n, j.d, "
            + ", ".join(exprs)
            + ", MAX(CASE WHEN j.d = 1 THEN j.c0 END) OVER (PARTITION BY "
            + partition
            + " ORDER BY j.n ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)"
            " AS earlier FROM JSON_TABLE(:doc, '$[*]' COLUMNS (n FOR ORDINALITY, "
            "d INT PATH '$[0]', " + ", ".join(declared) + ")) AS j) AS s "
            f"LEFT JOIN {quote(tombstones.name)} AS tb ON "
            + on
            + (
                f" LEFT JOIN {quote(truncates)} AS tt ON tt.{TRUNCATED_TABLE} = :table"
                if truncates
                else ""
            )
            + f" WHERE s.d = 0 AND (s.c0 <= tb.{VERSION} OR s.c0 <= s.earlier OR "
            + (f"s.c0 <= tt.{TRUNCATED_VERSION} OR " if truncates else "")
            + f"(s.c0 IS NULL AND (tb.{VERSION} IS NOT NULL OR s.earlier IS NOT NULL"
            + (f" OR tt.{TRUNCATED_VERSION} IS NOT NULL" if truncates else "")
            + "))) FOR UPDATE"
        )

    def document(
        self, rows: Sequence[dict[str, Any]], deletes: Sequence[bool]
    ) -> Document:
        """The read's JSON document for ``rows`` (staged order, keys not NULL),
        each a delete or an upsert."""
        elements = [self._element(r, d) for r, d in zip(rows, deletes)]
        outside = {}
        for at, row in enumerate(rows):
            for field in self._timestamps:
                if not _in_timestamp_range(row.get(field)):
                    outside[at] = (
                        f"1292: {field} {row[field]} is outside the range of a "
                        "TIMESTAMP (1970-01-01 00:00:01 to 2038-01-19 03:14:07 UTC)"
                    )
        return Document(elements, json.dumps(elements), outside)

    def stale(
        self, conn: Connection, document: Document
    ) -> tuple[set[int], dict[int, str]]:
        """Positions of the upserts of ``document`` that a delete of a newer or
        equal version, recorded before or earlier in it, makes stale; and the
        positions whose key or version MySQL cannot take as the target's types,
        with its warning."""
        elements = document.elements
        invalid = dict(document.outside)
        considered = [i for i in range(len(elements)) if i not in invalid]
        found, warning = self._read(
            conn,
            json.dumps([elements[i] for i in considered]) if invalid else document.text,
        )
        if warning:
            warned = self._warning_rows(conn, elements, considered)
            invalid |= warned
            considered = [i for i in considered if i not in warned]
            found, _ = self._read(conn, json.dumps([elements[i] for i in considered]))
        return {considered[n - 1] for n in found}, invalid

    def _element(self, row: dict[str, Any], is_delete: bool) -> list[Any]:
        values = [row.get(self.version), *(row[k] for k in self.key)]
        return [int(is_delete), *(e(v) for e, v in zip(self._encoders, values))]

    def _read(self, conn: Connection, doc: str) -> tuple[list[int], str | None]:
        """The stale rows' 1-based positions, and MySQL's first warning (a note,
        such as a rounded decimal, is what an insert does too: not counted)."""
        if doc == "[]":
            return [], None
        found = conn.execute(self.sql, {"doc": doc, "table": self.target})
        positions = list(found.scalars())
        count = conn.exec_driver_sql("SHOW COUNT(*) WARNINGS").scalar_one()
        shown = conn.exec_driver_sql("SHOW WARNINGS").all()
        warnings = [
            f"{code}: {message}" for level, code, message in shown if level != "Note"
        ]
        if not warnings and count > len(shown):
            warnings = [f"{count} warnings, not all shown"]
        return positions, warnings[0] if warnings else None

    def _warning_rows(
        self, conn: Connection, elements: list[list[Any]], part: list[int]
    ) -> dict[int, str]:
        """The positions in ``part`` whose values make MySQL warn, with the warning,
        by bisecting."""
        _, warning = self._read(conn, json.dumps([elements[i] for i in part]))
        if warning is None:
            return {}
        if len(part) == 1:
            return {part[0]: warning}
        middle = len(part) // 2
        return self._warning_rows(conn, elements, part[:middle]) | self._warning_rows(
            conn, elements, part[middle:]
        )


def _column_types(conn: Connection, table: str) -> dict[str, tuple[Any, ...]]:
    """The table's columns by lower-case name (a column name ignores case)."""
    rows = conn.execute(
        text(
            "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, CHARACTER_SET_NAME, "
            "COLLATION_NAME, CHARACTER_MAXIMUM_LENGTH FROM information_schema.COLUMNS "
            "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = :t"
        ),
        {"t": table},
    ).all()
    return {r[0].lower(): tuple(r[1:]) for r in rows if r[0] != DELETED_AT}


def _declare(
    name: str,
    data_type: str,
    column_type: str,
    charset: str | None,
    collation: str | None,
    length: int | None,
) -> tuple[str, str, Encode]:
    """The JSON_TABLE declaration of a column typed as ``name`` is, the expression
    that turns it into that type, and how a value of it is written in JSON."""
    data_type, column_type = data_type.lower(), column_type.lower()
    if data_type == "timestamp":  # read as the session (UTC) sees it
        column_type = column_type.replace("timestamp", "datetime")
    if data_type in PLAIN_TYPES and COLUMN_TYPE.match(column_type):
        return column_type, "{}", _json_value
    if (
        data_type in ("char", "varchar")
        and COLUMN_TYPE.match(column_type)
        and NAME.match(charset or "")
        and NAME.match(collation or "")
    ):
        return (
            f"{column_type} CHARACTER SET {charset} COLLATE {collation}",
            "{}",
            _json_value,
        )
    if data_type in ("binary", "varbinary") and isinstance(length, int):
        expr = (
            "UNHEX({})"
            if data_type == "varbinary"
            else "CAST(UNHEX({}) AS BINARY(%d))" % length
        )
        return f"VARCHAR({2 * length + 2}) CHARACTER SET ascii", expr, _hex
    raise ConfigError(
        f"tombstones: column {name} is {column_type}, which a tombstone cannot match "
        "exactly; key and version columns must be numbers, dates and times, CHAR, "
        "VARCHAR, BINARY or VARBINARY"
    )


def _in_timestamp_range(value: Any) -> bool:
    """Whether a TIMESTAMP column can hold ``value`` (a datetime, naive in UTC or
    zoned; anything else is left to MySQL)."""
    if not isinstance(value, datetime):
        return True
    if value.tzinfo is not None:
        value = value.astimezone(timezone.utc).replace(tzinfo=None)
    low, high = TIMESTAMP_RANGE
    return low <= value <= high


def _json_value(value: Any) -> Any:
    """``value`` as JSON that MySQL converts to the column's type as an insert does."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, (date, time)):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, Decimal):
        return str(value) if value.is_finite() else None
    return str(value)


def _hex(value: Any) -> str | None:
    if value is None:
        return None
    return (value if isinstance(value, bytes) else str(value).encode()).hex()
