"""A type 2 target's keys computed in Python from all their events: every key a
chunk touched whose events do not simply append (mysql/history_appends.py), read
back with locks as MySQL stores them and passed through merge/history.py's
function; only the rows that differ are written. A key's floor (history
retention: mysql/history_floors.py) stands for the events it folded: the record
open at it, from its start on; the rows before it stay as they are."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Table, and_, delete, func, select, tuple_
from sqlalchemy.dialects.mysql import insert

from wal_sink.config import Target
from wal_sink.config.table_section import END_AT, START_AT
from wal_sink.merge.history import Event, records
from wal_sink.mysql.history import (
    APPLIED_BY,
    DELETE,
    FLOOR_CLOSED,
    FLOOR_OPEN,
    OP,
    SEQUENCE,
    UPSERT,
)

RANK = "_wal_key_rank"


def read_keys(
    conn: Connection,
    mysql: Target,
    history: Table,
    events: Table,
    keys: list[tuple[Any, ...]],
) -> dict[int, tuple[list[dict[str, Any]], dict[Any, dict[str, Any]]]]:
    """Every event and every history row of ``keys``, read with locks, by key:
    its events, and its rows by ``__START_AT``. One key as the server compares
    keys ('A' and 'a ' under a case-insensitive PAD SPACE collation): its rank,
    for the events and, joined by key, for the history's rows."""
    key_columns = [events.c[k] for k in mysql.key]
    touched = tuple_(*key_columns).in_(keys)
    rank = func.dense_rank().over(order_by=key_columns).label(RANK)
    found = select(*events.c, rank).where(touched).with_for_update()
    by_key: dict[int, tuple[list[dict[str, Any]], dict[Any, dict[str, Any]]]] = {}
    for row in conn.execute(found).mappings():
        by_key.setdefault(row[RANK], ([], {}))[0].append(dict(row))
    ranks = select(*key_columns, rank).where(touched).distinct().subquery()
    table_keys = [history.c[k] for k in mysql.key]
    stored = (
        select(history, ranks.c[RANK])
        .join(ranks, and_(*(history.c[k] == ranks.c[k] for k in mysql.key)))
        .where(tuple_(*table_keys).in_(keys))
        .with_for_update()
    )
    for row in conn.execute(stored).mappings():
        if row[RANK] in by_key:
            by_key[row[RANK]][1][row[START_AT]] = dict(row)
    return by_key


def key_events(
    found: list[dict[str, Any]], rows: dict[Any, dict[str, Any]], data: list[str]
) -> tuple[list[Event], dict[Any, dict[str, Any]]]:
    """A key's events for merge/history.py, and the rows they make (by
    ``__START_AT``). Its floor at F becomes an upsert with its values at the start
    of the record open at F (the last row starting at or before F) — or nothing
    when none was open — and the rows starting before that record stay outside."""
    floor = next((e for e in found if e[OP] in (FLOOR_OPEN, FLOOR_CLOSED)), None)
    events = [
        Event(e[SEQUENCE], e[OP] == DELETE, {c: e[c] for c in data})
        for e in found
        if e is not floor
    ]
    if floor is None:
        return events, rows
    at = floor[SEQUENCE]
    start = max((s for s in rows if s <= at), default=at)
    if floor[OP] == FLOOR_OPEN:
        events.append(Event(start, False, {c: floor[c] for c in data}))
        return events, {s: r for s, r in rows.items() if s >= start}
    return events, {s: r for s, r in rows.items() if s > at}


def rewrite(
    conn: Connection,
    mysql: Target,
    history: Table,
    events: Table,
    keys: list[tuple[Any, ...]],
    written: list[str],
    token: str,
) -> dict[str, int]:
    """Compute the history of ``keys`` from all their events and write what
    differs from their rows: a record whose span or values changed is updated
    in place (by key and __START_AT), a new one inserted, one no longer there
    deleted; rows that stay are not touched. Returns how many events of each
    op the chunk ``token`` added."""
    data = [c for c in written if c not in mysql.key]
    new = {UPSERT: 0, DELETE: 0}
    writes, gone = [], []
    for found, rows in read_keys(conn, mysql, history, events, keys).values():
        for e in found:
            if e[APPLIED_BY].startswith(token):
                new[e[OP]] += 1
        first = min(found, key=lambda e: e[SEQUENCE])
        key_history, have = key_events(found, rows, data)
        have = dict(have)
        for record in records(key_history, mysql.tracks, mysql.ignore_null_updates):
            row = have.pop(record.start, None)
            # every record spells the key as its first event does (a late
            # event may come first: the records already written take it too)
            wanted = {
                **{k: first[k] for k in mysql.key},
                **record.values,
                END_AT: record.end,
            }
            if row is None or any(row[c] != v for c, v in wanted.items()):
                writes.append({START_AT: record.start} | wanted)
        gone += [tuple(r[c] for c in (*mysql.key, START_AT)) for r in have.values()]
    table_keys = [history.c[k] for k in mysql.key]
    if gone:
        spans = tuple_(*table_keys, history.c[START_AT])
        conn.execute(delete(history).where(spans.in_(gone)))
    if writes:
        stmt = insert(history)
        changed = [*mysql.key, *data, END_AT]
        conn.execute(
            stmt.on_duplicate_key_update({c: stmt.inserted[c] for c in changed}),
            writes,
        )
    return new
