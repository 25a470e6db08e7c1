"""The common case of a type 2 batch, written by the server in a few set-based
statements instead of each key's history being read back and computed in Python:
a key whose one new event in the chunk is an upsert later than every other event
it has (the history's tail moves on), or the first event of a key the history has
no row of. Their result is the one merge/history.py's function gives:

- a new key opens a record [s, NULL) with the upsert's values;
- a key with an open record: if every tracked column equals the open record's, the
  open record takes the upsert's values in place; else it ends at s and a record
  [s, NULL) opens, its key spelt as the open record's (the key's first event's);
  with ``ignore_null_updates`` a NULL keeps the open record's value.

Every other key the chunk touched (several new events, a late event, a delete, a
key whose earlier events left no open record) is returned, to be computed in
Python from all its events (protocol/history_rows.py). The events of the chunk are
found by the token their ``_wal_applied_by`` starts with (indexed), so no list of
keys is sent. A key's floor (mysql/history_floors.py) counts as one of its events.

Equality is Python's, as the function compares values read back: text byte for
byte (``BINARY``, trailing spaces count), others by value. A tracked FLOAT column
is read back rounded to its display, so two stored values can read back equal:
such a table takes the Python path for every key.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

from sqlalchemy import Connection, Table, text
from sqlalchemy.dialects.mysql import FLOAT
from sqlalchemy.types import String

from wal_sink.config.table_section import END_AT, START_AT
from wal_sink.mysql.history import (
    APPLIED_BY,
    DELETE,
    OP,
    SEQUENCE,
    TOKEN_INDEX,
    UPSERT,
)
from wal_sink.mysql.identifiers import quoted

SHARED = "LOCK IN SHARE MODE"


class HistoryAppends:
    """The statements for one history table and one set of written columns."""

    def __init__(
        self,
        conn: Connection,
        history: Table,
        events: Table,
        key: Sequence[str],
        data: Sequence[str],
        tracked: Sequence[str],
        keep_nulls: bool,
    ) -> None:
        q = partial(quoted, conn.dialect)
        names = [events.c[c].name for c in (*key, *data)]
        keys = [q(events.c[k].name) for k in key]
        cols = [q(events.c[c].name) for c in data]
        seq, op, by = q(SEQUENCE), q(OP), q(APPLIED_BY)
        start, end = q(START_AT), q(END_AT)
        h_name, e_name = q(history.name), q(events.name)
        by_token = f"{e_name} e FORCE INDEX ({TOKEN_INDEX})"

        def same_key(a: str, b: str) -> str:
            return " AND ".join(f"{a}.{k} = {b}.{k}" for k in keys)

        def value(c: str) -> str:
            """An upsert's value for column ``c`` against open record h."""
            return f"COALESCE(e.{c}, h.{c})" if keep_nulls else f"e.{c}"

        def equal(name: str) -> str:
            c = q(name)
            if isinstance(history.c[name].type, String):
                return f"BINARY h.{c} <=> BINARY {value(c)}"
            return f"h.{c} <=> {value(c)}"

        # every read current and locked, subqueries too (a plain read sees the
        # transaction's first snapshot: another sink's or a retry's events
        # committed since would be missed, and their key's new event lost)
        later = (
            f"EXISTS (SELECT 1 FROM {e_name} o WHERE {same_key('o', 'e')} AND "
            f"o.{seq} > e.{seq} {SHARED})"
        )
        others = later.replace(">", "<>")
        rows = f"EXISTS (SELECT 1 FROM {h_name} a WHERE {same_key('a', 'e')} {SHARED})"
        # the record open since before s: events before s made it
        open_before = f"h.{end} IS NULL AND h.{start} < e.{seq}"
        new_upsert = f"e.{op} = '{UPSERT}' AND e.{by} LIKE :token"
        new = f"e.{op} IN ('{UPSERT}', '{DELETE}') AND e.{by} LIKE :token"
        same = " AND ".join(equal(history.c[c].name) for c in tracked) or "TRUE"
        # the key's newest event (several new events of one key in the chunk: the
        # earlier ones are left, and so the key), or a new key's only one. The two
        # writes below do not test it again: a key any of whose new events is left
        # is computed whole after them, which makes all its rows right
        follows = f"NOT {later}"
        first = f"NOT {others} AND NOT {rows}"
        self.usable = not any(isinstance(history.c[c].type, FLOAT) for c in tracked)
        self._left = text(
            f"SELECT DISTINCT {', '.join(f'e.{k}' for k in keys)} FROM {by_token} "
            f"WHERE {new} AND NOT (e.{op} = '{UPSERT}' AND (({follows} "
            f"AND EXISTS (SELECT 1 FROM {h_name} h WHERE {same_key('h', 'e')} AND "
            f"{open_before} {SHARED})) OR ({first}))) {SHARED}"
        )
        self._insert = text(
            f"INSERT INTO {h_name} ({', '.join(q(n) for n in names)}, {start}, {end}) "
            f"SELECT {', '.join(f'COALESCE(h.{k}, e.{k})' for k in keys)}, "
            f"{', '.join(value(c) for c in cols)}{', ' if cols else ''}e.{seq}, NULL "
            f"FROM {by_token} LEFT JOIN {h_name} h ON {same_key('h', 'e')} AND "
            f"{open_before} WHERE {new_upsert} AND ((h.{start} IS NOT NULL AND "
            f"NOT ({same})) OR (h.{start} IS NULL AND {first}))"
        )
        # the open record the INSERT above followed ends at s, or takes the
        # upsert's values in place; the tracked columns compare the same before
        # and after either assignment, so the end is assigned last
        sets = [f"h.{c} = IF({same}, {value(c)}, h.{c})" for c in cols]
        self._update = text(
            f"UPDATE {h_name} h JOIN {by_token} ON {same_key('h', 'e')} AND "
            f"{open_before} SET "
            + ", ".join([*sets, f"h.{end} = IF({same}, NULL, e.{seq})"])
            + f" WHERE {new_upsert}"
        )
        self._counts = text(
            f"SELECT e.{op}, COUNT(*) FROM {by_token} WHERE {new} GROUP BY e.{op}"
        )

    def apply(
        self, conn: Connection, token: str
    ) -> tuple[list[tuple[Any, ...]], dict[str, int]]:
        """Write the histories of the chunk ``token`` added whose events append;
        return the other keys it touched (for the Python path) and how many
        events of each op the chunk added."""
        args = {"token": f"{token}%"}  # each event: the token and its row
        left = [tuple(r) for r in conn.execute(self._left, args)]
        conn.execute(self._insert, args)
        conn.execute(self._update, args)
        new = {UPSERT: 0, DELETE: 0}
        new.update({op: n for op, n in conn.execute(self._counts, args)})
        return left, new
