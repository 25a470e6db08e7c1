"""Applying a staged batch's rows to a type 2 target (``stored_as_scd_type = 2``),
inside the batch's transaction, chunk by chunk (docs/merge.md, "History"):

1. each record becomes an event in the events table (mysql/history.py): an upsert
   with its values, a ``[cdc]`` delete with its key; an event already there (a
   replay, a retried batch) is not added again and counts as skipped. A record
   without a key or a version, or one MySQL refuses, is set aside. A chunk whose
   every record becomes one is sent as multi-row INSERTs rendered in Arrow
   (history_events.py); any other, or one MySQL refuses, row by row;
2. the keys whose one new event appends to their history are written by the
   server in a few set-based statements (mysql/history_appends.py);
3. every other key the chunk touched has its events read back, with locks, as
   MySQL stores them, its history computed again from them (merge/history.py),
   and its rows made that history (history_rewrite.py).

So a key's history is always the function of its events, whatever order they
came in. The history table takes the stream's columns; others keep their defaults.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import pyarrow as pa
from sqlalchemy import (
    Connection,
    Engine,
    MetaData,
    Table,
)
from sqlalchemy.exc import DBAPIError, NoSuchTableError

from wal_sink.config import Config, Target
from wal_sink.config.table_section import START_AT
from wal_sink.durations import utc_now
from wal_sink.errors import TerminalError
from wal_sink.mysql.errors import is_row_error
from wal_sink.mysql.escaping import renders_exactly
from wal_sink.mysql.history import (
    APPLIED_AT,
    APPLIED_BY,
    DELETE,
    OP,
    SEQUENCE,
    UPSERT,
    events_table,
    events_upsert,
)
from wal_sink.mysql.history_appends import HistoryAppends
from wal_sink.mysql.history_floors import TOKEN_DIGITS, Floors, row_token
from wal_sink.mysql.multi_row import MultiRowUpsert
from wal_sink.mysql.target import reflect_target
from wal_sink.mysql.value_fit import say_warnings
from wal_sink.mysql.write_checks import check_writes
from wal_sink.protocol.batch_rows import ChunkCallback
from wal_sink.protocol.chunk_path import AppliedRows
from wal_sink.protocol.chunk_stream import coalesced
from wal_sink.protocol.history_events import arrow_events
from wal_sink.protocol.history_rewrite import rewrite
from wal_sink.protocol.row_by_row import (
    drop_non_finite,
    drop_null_keys,
    isolating,
    python_rows,
    refused,
)
from wal_sink.protocol.screen import Screen, target_screen
from wal_sink.wal.quarantine import Entry


@dataclass
class _Reflected:
    """What an applier learned of its tables, forgotten together when DDL changed
    them."""

    target: Table | None = None
    events: Table | None = None
    screen: Screen | None = None
    checked: set[frozenset[str]] = field(default_factory=set)
    """The stream schemas whose writes were checked (once each)."""
    appends: dict[tuple[str, ...], HistoryAppends] = field(default_factory=dict)
    """The set-based statements, by the columns a chunk writes."""
    multi: dict[tuple[str, ...], MultiRowUpsert | None] = field(default_factory=dict)
    """The events' multi-row INSERT, by the columns it sends."""
    floors: Floors | None = None


class HistoryApplier:
    """Applies rows to one type 2 target (``target``)."""

    def __init__(self, config: Config, target: Target, engine: Engine) -> None:
        self.config = config
        self.mysql = target
        self.engine = engine
        self._known = _Reflected()

    def refresh(self) -> None:
        """Forget the reflected tables (their DDL changed them)."""
        self._known = _Reflected()

    def close(self) -> None:
        """Nothing to end: no thread of its own."""

    def target(self) -> Table:
        """The reflected history table (once)."""
        if self._known.target is None:
            self._known.target = reflect_target(self.engine, self.mysql.table)
        return self._known.target

    def _screen(self, conn: Connection) -> Screen:
        """Rows MySQL cannot be sent or would change, set aside (screen.py)."""
        if self._known.screen is None:
            self._known.screen = target_screen(
                conn, self.config, self.mysql, self.target()
            )
        return self._known.screen

    def _required(self) -> set[str]:
        """The history's NOT NULL data columns (the events table allows NULL)."""
        return {
            c.name
            for c in self.target().c
            if not c.nullable and c.name not in (START_AT, *self.mysql.key)
        }

    def events(self, conn: Connection) -> Table:
        """The events table as it is, read on the batch's connection (made at
        start: no DDL in a batch)."""
        if self._known.events is None:
            try:
                self._known.events = Table(
                    events_table(self.mysql), MetaData(), autoload_with=conn
                )
            except NoSuchTableError:
                raise TerminalError(
                    f"the events table {events_table(self.mysql)} is gone; the "
                    "next start makes it again",
                    table=self.mysql.table,
                ) from None
        return self._known.events

    def apply_chunks(
        self,
        conn: Connection,
        chunks: Iterator[pa.RecordBatch],
        total: int,
        on_chunk: ChunkCallback | None = None,
        stream: Sequence[str] | None = None,
    ) -> AppliedRows:
        """Apply ``chunks`` (``total`` rows) in order, as a staged batch's."""
        applied = AppliedRows()
        done = 0
        screen = self._screen(conn)
        render = renders_exactly(conn, self.config.sink.id)
        for chunk in coalesced(chunks, self.config.wal.chunk_rows):
            fit = screen.fit(chunk.schema)
            fit.refuse()
            say_warnings(self.config.sink.id, fit)
            screened = screen(chunk)
            applied += AppliedRows(set_aside=screened.set_aside)
            applied += self._chunk(conn, screened.chunk, render)
            done += screened.read
            if on_chunk is not None:
                on_chunk(done, total)
        return applied

    def _chunk(
        self, conn: Connection, chunk: pa.RecordBatch, render: bool
    ) -> AppliedRows:
        """``render``: the session reads text rendered in Arrow exactly."""
        mysql, cdc = self.mysql, self.config.cdc
        names = chunk.schema.names
        if frozenset(names) not in self._known.checked:
            check_writes(conn, self.config, mysql, names)  # as the start does
            self._refuse_unkept(conn, names)
            self._known.checked.add(frozenset(names))
        events = self.events(conn)
        written = [n for n in names if n in events.c and n not in (SEQUENCE, OP)]
        if render and (fast := self._by_arrow(conn, chunk, written)) is not None:
            return fast
        bad: list[Entry] = []
        required = self._required()
        rows = drop_non_finite(drop_null_keys(python_rows(chunk), mysql.key, bad), bad)
        recorded: dict[int, dict[str, Any]] = {}
        params = []
        for row in rows:
            version = row.get(mysql.version_column)
            if version is None:
                reason = f"a history record needs a version ({mysql.version_column} "
                bad.append(Entry(row, reason + "is NULL)"))
                continue
            removes = cdc is not None and row.get(cdc.op_column) in cdc.delete_values
            nulls = [c for c in written if c in required and row.get(c) is None]
            if nulls and not removes:
                reason = f"NULL in NOT NULL column(s) {', '.join(sorted(nulls))}"
                bad.append(Entry(row, reason))
                continue
            event = {
                # a delete's event has its key only (one statement for all)
                **{c: None if removes else row.get(c) for c in written},
                **{k: row[k] for k in mysql.key},
                SEQUENCE: version,
                OP: DELETE if removes else UPSERT,
            }
            recorded[id(event)] = row
            params.append(event)
        return AppliedRows(set_aside=bad) + self._isolated(
            conn, params, recorded, written
        )

    def _refuse_unkept(self, conn: Connection, names: Sequence[str]) -> None:
        """Stop (TerminalError) before a stream column the events table lacks is
        dropped from every record: the history gained it after this sink started
        (the events table reflected again first: another sink's start may have
        added it there), or the history lost it since the batch was staged."""
        op = self.config.cdc.op_column.lower() if self.config.cdc else None

        def unkept() -> list[str]:
            kept = self.events(conn).c
            return [n for n in names if n not in kept and n.lower() != op]

        if unkept():
            self.refresh()
            if lacking := unkept():
                raise TerminalError(
                    f"stream column(s) {', '.join(lacking)} are not columns of the "
                    f"events table {events_table(self.mysql)}: if the history has "
                    "them now, restart the sink (its start adds them there); if "
                    "not, add them to the history or leave them out of the stream "
                    "([transform])",
                    table=self.mysql.table,
                )

    def _isolated(
        self,
        conn: Connection,
        params: list[dict[str, Any]],
        recorded: dict[int, dict[str, Any]],
        written: list[str],
    ) -> AppliedRows:
        """The events ``params`` applied under a savepoint; when MySQL refuses a
        key's new records (a CHECK, a foreign key, a trigger), key by key, the
        refused key's records set aside with MySQL's reason."""
        savepoint = conn.begin_nested()
        try:
            applied = self._apply(conn, params, recorded, written)
        except DBAPIError as e:
            if not is_row_error(e):
                raise  # a deadlock or a lost link may have ended the transaction
            savepoint.rollback()
            by_key: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
            for event in params:
                key = tuple(event[k] for k in self.mysql.key)
                by_key.setdefault(key, []).append(event)
            if len(by_key) == 1:
                reason = refused(conn, params[0], e)
                return AppliedRows(
                    set_aside=[Entry(recorded[id(r)], reason) for r in params]
                )
            parts = AppliedRows()
            for part in by_key.values():
                parts += self._isolated(conn, part, recorded, written)
            return parts
        savepoint.commit()
        return applied

    def _apply(
        self,
        conn: Connection,
        params: list[dict[str, Any]],
        recorded: dict[int, dict[str, Any]],
        written: list[str],
    ) -> AppliedRows:
        """Add the events (each MySQL refuses set aside), then write the histories
        of their keys; a history MySQL refuses raises. The events carry a token of
        this call (not of the chunk: a call MySQL refused was rolled back, and the
        token counts what the chunk added) and their row's number in it."""
        events = self.events(conn)
        token = uuid.uuid4().hex[:TOKEN_DIGITS]
        now = utc_now()
        for i, event in enumerate(params):
            event[APPLIED_BY] = row_token(token, i)
            event[APPLIED_AT] = now
        bad: list[Entry] = []
        isolating(conn, events_upsert(events), params, bad)
        refused_ids = {id(e.record) for e in bad}
        keys = {
            tuple(e[k] for k in self.mysql.key)
            for e in params
            if id(e) not in refused_ids
        }
        set_aside = [Entry(recorded[id(e.record)], e.reason) for e in bad]
        if not keys:
            return AppliedRows(set_aside=set_aside)
        new, floored = self._histories(conn, written, token, lambda: keys)
        set_aside += [Entry(recorded[id(params[i])], reason) for i, reason in floored]
        repeated = len(params) - len(set_aside) - sum(new.values())
        return AppliedRows(new[UPSERT], new[DELETE], repeated, set_aside)

    def _by_arrow(
        self, conn: Connection, chunk: pa.RecordBatch, written: list[str]
    ) -> AppliedRows | None:
        """The chunk's events sent as multi-row INSERTs rendered in Arrow
        (protocol/history_events.py), then the histories of their keys; None, with
        nothing written, when a record would not become an event or MySQL refuses
        one: the row-by-row way then finds which."""
        events, mysql = self.events(conn), self.mysql
        token = uuid.uuid4().hex[:TOKEN_DIGITS]
        batch = arrow_events(
            chunk,
            written,
            mysql.key,
            mysql.version_column or "",
            self.config.cdc,
            self._required(),
            token,
            utc_now(),
        )
        if batch is None:
            return None
        names = tuple(batch.schema.names)
        if names not in self._known.multi:
            self._known.multi[names] = MultiRowUpsert.for_schema(
                conn, events_upsert(events), names, batch.schema
            )
        multi = self._known.multi[names]
        if multi is None or not multi.renders(batch):
            return None
        savepoint = conn.begin_nested()
        try:
            multi.apply(conn, batch)
            new, floored = self._histories(
                conn,
                written,
                token,
                lambda: set(zip(*(chunk.column(k).to_pylist() for k in mysql.key))),
            )
        except DBAPIError as e:
            if not is_row_error(e):
                raise
            savepoint.rollback()
            return None
        savepoint.commit()
        set_aside = [
            Entry(python_rows(chunk.slice(i, 1))[0], reason) for i, reason in floored
        ]
        repeated = batch.num_rows - len(set_aside) - sum(new.values())
        return AppliedRows(new[UPSERT], new[DELETE], repeated, set_aside)

    def _histories(
        self,
        conn: Connection,
        written: list[str],
        token: str,
        keys: Callable[[], Iterable[tuple[Any, ...]]],
    ) -> tuple[dict[str, int], list[tuple[int, str]]]:
        """Write the histories of the keys whose events ``token`` added (``keys``)
        and count those events by op: set-based where they append
        (mysql/history_appends.py), the rest computed here. Events at or below
        their key's floor are set aside first: returned by row, with the reason."""
        events = self.events(conn)
        floored = [
            (row, f"at or below its key's floor {floor!r}: history_retention "
             "folded the key's events up to it")
            for row, floor in self._floors_for(conn, events).set_aside(conn, token)
        ]  # fmt: skip
        computed = partial(rewrite, conn, self.mysql, self.target(), events)
        appends = self._appends_for(conn, events, written)
        if appends.usable:
            left, new = appends.apply(conn, token)
            if left:
                computed(sorted(left, key=repr), written, token)
            return new, floored
        return computed(sorted(keys(), key=repr), written, token), floored

    def _floors_for(self, conn: Connection, events: Table) -> Floors:
        if self._known.floors is None:
            self._known.floors = Floors(conn, events, self.mysql.key)
        return self._known.floors

    def _appends_for(
        self, conn: Connection, events: Table, written: list[str]
    ) -> HistoryAppends:
        """The set-based statements for chunks writing ``written`` (made once)."""
        if tuple(written) not in self._known.appends:
            data = [c for c in written if c not in self.mysql.key]
            self._known.appends[tuple(written)] = HistoryAppends(
                conn,
                self.target(),
                events,
                self.mysql.key,
                data,
                [c for c in data if self.mysql.tracks(c)],
                self.mysql.ignore_null_updates,
            )
        return self._known.appends[tuple(written)]
