"""``DATETIME`` columns MySQL fills with the time: the server's wall clock, as every
other writer gets it, not the sink session's.

The sink's sessions run in UTC (engine.py), so the stream's timestamps land as they
are. But MySQL fills a ``DATETIME … DEFAULT CURRENT_TIMESTAMP`` or ``ON UPDATE
CURRENT_TIMESTAMP`` column with the wall clock of the writing session's zone: with
the server at +02:00, rows the sink wrote would be two hours behind everyone
else's. So where the stream does not write such a column the statements assign it
themselves, the server's wall clock at the statement's start, as a new session of
the server's zone (its global ``time_zone``) reads ``NOW()``; converting from UTC
into a zone with daylight saving time is never ambiguous:

- on insert, a ``DEFAULT CURRENT_TIMESTAMP`` column takes that time;
- on update, an ``ON UPDATE CURRENT_TIMESTAMP`` column takes it when the upsert
  changes the row and keeps its value otherwise, MySQL's own rule. Its assignment
  comes before every assignment that may change a value, where each column still
  holds its stored value, and compares the value each later assignment gives with
  the stored one: text byte for byte, as MySQL compares the stored row (``'a'`` for
  ``'A'`` is a change whatever the collation says).

``TIMESTAMP`` columns hold instants, which come out right whatever the session's
zone: MySQL fills them itself. A table without such ``DATETIME`` columns gets the
statements it always had.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import (
    Column,
    ColumnElement,
    DateTime,
    Table,
    case,
    cast,
    literal_column,
    or_,
)
from sqlalchemy.dialects import mysql as types

from wal_sink.mysql.target_profile import facts_of


def server_now(digits: int) -> ColumnElement:
    """The server's wall clock when the statement started, with ``digits``
    fractional digits. Literal SQL: an upsert's UPDATE part holds no parameters."""
    return literal_column(
        f"CONVERT_TZ(UTC_TIMESTAMP({digits:d}), '+00:00', @@global.time_zone)",
        DateTime(),
    )


def clock_defaults(table: Table, written: Sequence[str]) -> dict[str, ColumnElement]:
    """What an insert assigns the ``DEFAULT CURRENT_TIMESTAMP`` columns of
    ``table`` that the stream does not write (``written``)."""
    return {
        column.name: server_now(digits)
        for column, digits in _clocked(table, written, on_update=False)
    }


def clock_updates(
    table: Table, written: Sequence[str], assignments: Sequence[tuple[str, Any]]
) -> list[tuple[str, ColumnElement]]:
    """The assignments of the ``ON UPDATE CURRENT_TIMESTAMP`` columns the stream
    does not write, to go before ``assignments`` (each a column and the value it
    takes): the server's time where one of those values differs from the stored
    one, the stored time otherwise."""
    clocked = list(_clocked(table, written, on_update=True))
    if not clocked:
        return []
    changes = or_(
        *[
            _differs(table.c[name], value)
            for name, value in assignments
            if value is not table.c[name]  # assigned to itself: never a change
        ]
    )
    return [
        (column.name, case((changes, server_now(digits)), else_=column))
        for column, digits in clocked
    ]


def _clocked(
    table: Table, written: Sequence[str], *, on_update: bool
) -> Iterable[tuple[Column, int]]:
    names = {name.lower() for name in written}
    for column in table.columns:
        facts = facts_of(column)
        if facts is None or column.name.lower() in names:
            continue
        digits = facts.now_on_update if on_update else facts.now_on_insert
        if digits is not None:
            yield column, digits


def _differs(column: Column, value: ColumnElement) -> ColumnElement[bool]:
    """Whether ``column`` would store something else than it holds when assigned
    ``value``. The upsert's values are already the column's own (``VALUES(col)``);
    the by-key UPDATE's are parameters, taken into the column's character set
    here. (A text the column would store changed, as a ``CHAR`` drops trailing
    spaces, was set aside before: value_fit.py.)"""
    facts = facts_of(column)
    stored: ColumnElement = column
    if facts is not None and facts.collation is not None:
        value = cast(value, types.CHAR(charset=facts.collation.split("_")[0]))
        value, stored = cast(value, types.BINARY()), cast(column, types.BINARY())
    return ~value.is_not_distinct_from(stored)
