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

The writes come first and the keys left are looked for only when the counts say
some are: the read that counts the chunk's events by op also counts those with a
later event of their key; with none, no delete, every upsert opening a record (the
records that follow open ones plus the new keys' first), and as many open records
ended as followed, every upsert appended. A chunk with an update in place always
looks. That read, and the one for the keys left, are of current rows with shared
locks.

Equality is Python's, as the function compares values read back: text byte for
byte (``BINARY``, trailing spaces count), others by value. A tracked FLOAT column
is read back rounded to its display, so two stored values can read back equal:
such a table takes the Python path for every key.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

from sqlalchemy import Connection, Table, TextClause, text
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
        # the record open since before s: events before s made it
        open_before = f"h.{end} IS NULL AND h.{start} < e.{seq}"
        new_upsert = f"e.{op} = '{UPSERT}' AND e.{by} LIKE :token"
        new = f"e.{op} IN ('{UPSERT}', '{DELETE}') AND e.{by} LIKE :token"
        same = " AND ".join(equal(history.c[c].name) for c in tracked) or "TRUE"
        columns = f"({', '.join(q(n) for n in names)}, {start}, {end})"
        self.usable = not any(isinstance(history.c[c].type, FLOAT) for c in tracked)
        self._counts = text(
            f"SELECT e.{op}, COUNT(*), SUM({later}) FROM {by_token} WHERE {new} "
            f"GROUP BY e.{op} {SHARED}"
        )
        # the writes do not test "no later event": a key any of whose new events
        # is left is computed whole after them, which makes all its rows right.
        # The record that follows an open one whose tracked values change, its
        # key spelt as the open record's (the key's first event's)
        self._insert = text(
            f"INSERT INTO {h_name} {columns} SELECT "
            f"{', '.join(f'h.{k}' for k in keys)}, "
            f"{', '.join(value(c) for c in cols)}{', ' if cols else ''}e.{seq}, NULL "
            f"FROM {by_token} JOIN {h_name} h ON {same_key('h', 'e')} AND "
            f"{open_before} WHERE {new_upsert} AND NOT ({same})"
        )
        # the open record the INSERT above followed ends at s, or takes the
        # upsert's values in place; the tracked columns compare the same before
        # and after either assignment, so the end is assigned last. Its rowcount
        # is the open records met (the dialect's FOUND_ROWS)
        sets = [f"h.{c} = IF({same}, {value(c)}, h.{c})" for c in cols]

        def update(assigned: list[str]) -> TextClause:
            return text(
                f"UPDATE {h_name} h JOIN {by_token} ON {same_key('h', 'e')} AND "
                f"{open_before} SET {', '.join(assigned)} WHERE {new_upsert}"
            )

        self._update = update([*sets, f"h.{end} = IF({same}, NULL, e.{seq})"])
        # the same when the INSERT followed as many open records as the chunk has
        # upserts: every record met ends (no comparison again, a fifth less time)
        self._close = update([f"h.{end} = e.{seq}"])

        def no_rows(but_at_s: bool = False) -> str:
            """No row of e's key (``but_at_s``: but the one starting at s)."""
            other = f" AND a.{start} <> e.{seq}" if but_at_s else ""
            return (
                f"NOT EXISTS (SELECT 1 FROM {h_name} a WHERE {same_key('a', 'e')}"
                f"{other} {SHARED})"
            )

        # a new key's only event: no other event, no row
        first = f"NOT {others} AND {no_rows()}"
        self._first = text(
            f"INSERT INTO {h_name} {columns} SELECT "
            f"{', '.join(f'e.{k}' for k in keys)}, "
            f"{', '.join(f'e.{c}' for c in cols)}{', ' if cols else ''}e.{seq}, NULL "
            f"FROM {by_token} WHERE {new_upsert} AND {first}"
        )
        # the keys left, read after the writes: an upsert appended if it is its
        # key's newest event and the record open before it was met (it is still
        # open, or ends at s), or if it opened a new key (its key's only row is
        # the one starting at s)
        met = (
            f"EXISTS (SELECT 1 FROM {h_name} h WHERE {same_key('h', 'e')} AND "
            f"h.{start} < e.{seq} AND (h.{end} IS NULL OR h.{end} = e.{seq}) "
            f"{SHARED})"
        )
        opened = f"NOT {others} AND {no_rows(but_at_s=True)}"
        self._left = text(
            f"SELECT DISTINCT {', '.join(f'e.{k}' for k in keys)} FROM {by_token} "
            f"WHERE {new} AND NOT (e.{op} = '{UPSERT}' AND ((NOT {later} AND "
            f"{met}) OR ({opened}))) {SHARED}"
        )

    def apply(
        self, conn: Connection, token: str
    ) -> tuple[list[tuple[Any, ...]], dict[str, int]]:
        """Write the histories of the chunk ``token`` added whose events append;
        return the other keys it touched (for the Python path) and how many
        events of each op the chunk added."""
        args = {"token": f"{token}%"}  # each event: the token and its row
        new = {UPSERT: 0, DELETE: 0}
        later = 0
        for op, count, followed in conn.execute(self._counts, args):
            new[op], later = count, later + followed
        followed = conn.execute(self._insert, args).rowcount
        opened = 0
        if followed < new[UPSERT]:
            opened = conn.execute(self._first, args).rowcount
        if followed + opened == new[UPSERT]:
            # each upsert opened a record: every record met ends. The INSERT
            # above cannot count one twice (a key's two open records would give
            # two rows of one primary key), so the count is trusted
            ended = conn.execute(self._close, args).rowcount
            if not later and not new[DELETE] and ended == followed:
                return [], new
        else:
            # an open record updated in place: met rows are no count of upserts
            # (a key with two open records, another writer's, would count twice
            # and could hide a key that did not append), so the keys left are read
            conn.execute(self._update, args)
        return [tuple(r) for r in conn.execute(self._left, args)], new
