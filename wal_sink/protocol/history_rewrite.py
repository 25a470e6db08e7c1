"""A type 2 target's keys computed in Python from all their events: every key a
chunk touched whose events do not simply append (mysql/history_appends.py), read
back with locks as MySQL stores them and passed through merge/history.py's
function; only the rows that differ are written."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Table, and_, delete, func, select, tuple_
from sqlalchemy.dialects.mysql import insert

from wal_sink.config import Target
from wal_sink.config.table_section import END_AT, START_AT
from wal_sink.merge.history import Event, records
from wal_sink.mysql.history import APPLIED_BY, DELETE, OP, SEQUENCE, UPSERT

RANK = "_wal_key_rank"


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
    op this chunk added."""
    key_columns = [events.c[k] for k in mysql.key]
    touched = tuple_(*key_columns).in_(keys)
    # one key as the server compares keys ('A' and 'a ' under a
    # case-insensitive PAD SPACE collation): its rank, for the events and,
    # joined by key, for the history's rows
    rank = func.dense_rank().over(order_by=key_columns).label(RANK)
    found = select(*events.c, rank).where(touched).with_for_update()
    data = [c for c in written if c not in mysql.key]
    by_key: dict[int, list[dict[str, Any]]] = {}
    new = {UPSERT: 0, DELETE: 0}
    for row in conn.execute(found).mappings():
        by_key.setdefault(row[RANK], []).append(dict(row))
        if row[APPLIED_BY] == token:
            new[row[OP]] += 1
    ranks = select(*key_columns, rank).where(touched).distinct().subquery()
    table_keys = [history.c[k] for k in mysql.key]
    stored = (
        select(history, ranks.c[RANK])
        .join(ranks, and_(*(history.c[k] == ranks.c[k] for k in mysql.key)))
        .where(tuple_(*table_keys).in_(keys))
        .with_for_update()
    )
    rows: dict[int, dict[Any, dict[str, Any]]] = {}
    for row in conn.execute(stored).mappings():
        rows.setdefault(row[RANK], {})[row[START_AT]] = dict(row)
    writes, gone = [], []
    for group, found_events in by_key.items():
        first = min(found_events, key=lambda e: e[SEQUENCE])
        have = rows.get(group, {})
        for record in records(
            (
                Event(e[SEQUENCE], e[OP] == DELETE, {c: e[c] for c in data})
                for e in found_events
            ),
            mysql.tracks,
            mysql.ignore_null_updates,
        ):
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
