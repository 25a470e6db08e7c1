"""``mysql.history_retention``: purge folds the events a history keeps (its
source, merge/history.py) once they are older than the retention, key by key,
into one floor row (mysql/history_floors.py).

For a key with an event applied before ``now - retention``, its floor F is the
newest such event's sequence; every event at or below F (a later-applied late one
too) is replaced by one row at F: the record open at F with its values as of F
(``O``), or none open (``C``), spelling the key as its first event did. The history
rows stay as they are; the records from the one open at F on are still computed
from the floor and the events after it, so an event above F splits, ends or
updates them as before. An event at or below F arriving later is set aside: what
the floor folded cannot be split any more.

Keys go in groups, each in one transaction that reads their events and rows with
locks (a batch writing one of them waits, or is waited for): a purge killed
between groups leaves whole keys folded or not.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import Table, delete, select, tuple_
from sqlalchemy.dialects.mysql import insert

from wal_sink.config import Target
from wal_sink.durations import parse_duration, utc_now
from wal_sink.merge.history import records
from wal_sink.mysql.history import (
    APPLIED_AT,
    APPLIED_BY,
    DELETE,
    FLOOR,
    FLOOR_CLOSED,
    FLOOR_OPEN,
    OP,
    SEQUENCE,
    UPSERT,
    events_table,
)
from wal_sink.mysql.target import reflect_target
from wal_sink.protocol.history_rewrite import key_events, read_keys
from wal_sink.protocol.sink_instance import SinkInstance

KEYS_PER_TRANSACTION = 500


@dataclass(frozen=True)
class Folded:
    table: str
    keys: int
    """Keys that gained or moved their floor."""
    events: int
    """Events folded (a floor moved counts as one of them)."""


def fold_histories(sink: SinkInstance, dry_run: bool = False) -> list[Folded]:
    """Fold (or with ``dry_run`` count) every history's events older than its
    ``history_retention``; a history without one keeps them all."""
    now = utc_now()
    return [
        _fold(sink, target, now - timedelta(seconds=parse_duration(retention)), dry_run)
        for target in sink.config.mysql.targets
        if target.scd_type == 2 and (retention := target.history_retention)
    ]


def _fold(sink: SinkInstance, target: Target, cutoff: Any, dry_run: bool) -> Folded:
    history = reflect_target(sink.engine, target.table)
    events = reflect_target(sink.engine, events_table(target))
    key_columns = [events.c[k] for k in target.key]
    old = _old_events(events, cutoff)
    with sink.engine.connect() as conn:
        keys = [
            tuple(r) for r in conn.execute(select(*key_columns).where(old).distinct())
        ]
    folded = Folded(target.table, 0, 0)
    for start in range(0, len(keys), KEYS_PER_TRANSACTION):
        group = keys[start : start + KEYS_PER_TRANSACTION]
        with sink.engine.begin() as conn:
            for found, rows in read_keys(conn, target, history, events, group).values():
                moved = _fold_key(conn, target, events, found, rows, cutoff, dry_run)
                if moved:
                    folded = Folded(
                        target.table, folded.keys + 1, folded.events + moved
                    )
    return folded


def _old_events(events: Table, cutoff: Any) -> Any:
    """An event (not a floor) applied before ``cutoff``, or before the time was
    kept."""
    applied = events.c[APPLIED_AT]
    return (events.c[APPLIED_BY] != FLOOR) & (applied.is_(None) | (applied < cutoff))


def _fold_key(
    conn: Any,
    target: Target,
    events: Table,
    found: list[dict[str, Any]],
    rows: dict[Any, dict[str, Any]],
    cutoff: Any,
    dry_run: bool,
) -> int:
    """Fold one key's events up to its newest old one; how many went."""
    old = [
        e[SEQUENCE]
        for e in found
        if e[OP] in (UPSERT, DELETE)
        and (e[APPLIED_AT] is None or e[APPLIED_AT] < cutoff)
    ]
    if not old:
        return 0
    at = max(old)
    upto = [e for e in found if e[SEQUENCE] <= at]
    if dry_run:
        return len(upto)
    data = [
        c.name
        for c in events.c
        if c.name not in (*target.key, SEQUENCE, OP, APPLIED_BY, APPLIED_AT)
    ]
    kept, _ = key_events(upto, rows, data)
    made = records(kept, target.tracks, target.ignore_null_updates)
    open_ = made[-1].values if made and made[-1].end is None else None
    first = min(found, key=lambda e: e[SEQUENCE])
    spans = tuple_(*(events.c[k] for k in target.key), events.c[SEQUENCE])
    conn.execute(
        delete(events).where(
            spans.in_([(*(e[k] for k in target.key), e[SEQUENCE]) for e in upto])
        )
    )
    conn.execute(
        insert(events).values(
            {
                **{k: first[k] for k in target.key},
                **(open_ or {}),
                SEQUENCE: at,
                OP: FLOOR_CLOSED if open_ is None else FLOOR_OPEN,
                APPLIED_BY: FLOOR,
                APPLIED_AT: None,
            }
        )
    )
    return len(upto)
