"""Keys' floors in a type 2 target's events table (``history_retention``): purge
folds a key's events up to a sequence F into one row at F (op ``O``: the record
open at F, with its values as of F; ``C``: none open), ``_wal_applied_by`` =
``floor``. What was folded cannot be told apart any more, so an event of a chunk
at or below its key's floor is set aside, here, before the chunk's histories are
written; one above it is applied as any other (the floor stands for the events
it folded: protocol/history_rewrite.py).

A chunk's events carry its token followed by their row's number in the chunk, so
each one found here names the record it came from.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

from sqlalchemy import Connection, Table, bindparam, text

from wal_sink.mysql.history import (
    APPLIED_BY,
    DELETE,
    FLOOR,
    FLOOR_CLOSED,
    FLOOR_OPEN,
    OP,
    SEQUENCE,
    TOKEN_INDEX,
    UPSERT,
)
from wal_sink.mysql.identifiers import quoted

ROW_DIGITS = 8
"""The hexadecimal digits of a row's number after a chunk's token (32 in all)."""
TOKEN_DIGITS = 32 - ROW_DIGITS


def row_token(token: str, row: int) -> str:
    """The ``_wal_applied_by`` of row ``row`` of the chunk ``token``."""
    return f"{token}{row:0{ROW_DIGITS}x}"


def row_of(applied_by: str) -> int:
    return int(applied_by[TOKEN_DIGITS:], 16)


class Floors:
    """The statements on one events table's floors."""

    def __init__(self, conn: Connection, events: Table, key: Sequence[str]) -> None:
        q = partial(quoted, conn.dialect)
        e_name = q(events.name)
        seq, op, by = q(SEQUENCE), q(OP), q(APPLIED_BY)
        same_key = " AND ".join(
            f"f.{q(events.c[k].name)} = e.{q(events.c[k].name)}" for k in key
        )
        floors = f"'{FLOOR_OPEN}', '{FLOOR_CLOSED}'"
        indexed = f"{e_name} FORCE INDEX ({TOKEN_INDEX})"
        # an event at a floor's sequence made the floor its own (events_upsert)
        self._any = text(
            f"SELECT 1 FROM {indexed} WHERE {op} IN ({floors}) AND ({by} = "
            f"'{FLOOR}' OR {by} LIKE :token) LIMIT 1 LOCK IN SHARE MODE"
        )
        self._at = text(
            f"SELECT {by}, {seq} FROM {indexed} WHERE {op} IN ({floors}) AND {by} "
            "LIKE :token FOR UPDATE"
        )
        self._restore = text(
            f"UPDATE {e_name} SET {by} = '{FLOOR}' WHERE {op} IN ({floors}) AND "
            f"{by} LIKE :token"
        )
        self._below = text(
            f"SELECT e.{by}, f.{seq} FROM {e_name} e FORCE INDEX ({TOKEN_INDEX}) "
            f"JOIN {e_name} f ON {same_key} AND f.{op} IN ({floors}) AND "
            f"f.{by} = '{FLOOR}' AND f.{seq} > e.{seq} WHERE e.{op} IN "
            f"('{UPSERT}', '{DELETE}') AND e.{by} LIKE :token FOR UPDATE"
        )
        self._remove = text(
            f"DELETE FROM {e_name} WHERE {op} IN ('{UPSERT}', '{DELETE}') AND {by} "
            "IN :rows"
        ).bindparams(bindparam("rows", expanding=True))

    def set_aside(self, conn: Connection, token: str) -> list[tuple[int, Any]]:
        """The rows of chunk ``token`` whose events are at or below their key's
        floor, each with the floor's sequence; their events removed (a floor an
        event was seen again at is the floor again). None without floors."""
        args = {"token": f"{token}%"}
        if conn.execute(self._any, args).first() is None:
            return []
        found = [(row_of(by), floor) for by, floor in conn.execute(self._at, args)]
        if found:
            conn.execute(self._restore, args)
        below = list(conn.execute(self._below, args))
        if below:
            conn.execute(self._remove, {"rows": [by for by, _ in below]})
        return found + [(row_of(by), floor) for by, floor in below]
