"""Applying a staged batch's rows to a type 2 target (``stored_as_scd_type = 2``),
inside the batch's transaction, chunk by chunk (docs/merge.md, "History"):

1. each record becomes an event in the events table (mysql/history.py): an upsert
   with its values, a ``[cdc]`` delete with its key; an event already there (a
   replay, a retried batch) is not added again and counts as skipped. A record
   without a key or a version, or one MySQL refuses, is set aside;
2. every event of each key the chunk touched is read back, with locks, as MySQL
   stores it, and the key's history computed again from them (merge/history.py);
3. the key's rows in the history table are replaced by that history.

So a key's history is always the function of its events, whatever order they
came in. The history table takes the stream's columns; others keep their defaults.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from sqlalchemy import (
    Connection,
    Engine,
    MetaData,
    Table,
    and_,
    delete,
    func,
    literal_column,
    select,
    tuple_,
)
from sqlalchemy.dialects.mysql import insert
from sqlalchemy.exc import DBAPIError, NoSuchTableError

from wal_sink.config import Config, Target
from wal_sink.config.table_section import END_AT, START_AT
from wal_sink.errors import TerminalError
from wal_sink.merge.history import Event, records
from wal_sink.mysql.errors import is_row_error
from wal_sink.mysql.history import (
    APPLIED_BY,
    DELETE,
    OP,
    SEQUENCE,
    UPSERT,
    events_table,
)
from wal_sink.mysql.history_appends import HistoryAppends
from wal_sink.mysql.target import reflect_target
from wal_sink.mysql.value_fit import say_warnings
from wal_sink.mysql.write_checks import check_writes
from wal_sink.protocol.batch_rows import ChunkCallback
from wal_sink.protocol.chunk_path import AppliedRows
from wal_sink.protocol.chunk_stream import coalesced
from wal_sink.protocol.row_by_row import (
    drop_non_finite,
    drop_null_keys,
    isolating,
    python_rows,
    refused,
)
from wal_sink.protocol.screen import Screen, target_screen
from wal_sink.wal.quarantine import Entry

RANK = "_wal_key_rank"


class HistoryApplier:
    """Applies rows to one type 2 target (``target``)."""

    def __init__(self, config: Config, target: Target, engine: Engine) -> None:
        self.config = config
        self.mysql = target
        self.engine = engine
        self._target: Table | None = None
        self._events: Table | None = None
        self._screened: Screen | None = None
        self._required: set[str] = set()
        """The history's NOT NULL data columns (the events table allows NULL)."""
        self._checked: set[frozenset[str]] = set()
        """The stream schemas whose writes were checked (once each)."""
        self._appends: dict[tuple[str, ...], HistoryAppends] = {}
        """The set-based statements, by the columns a chunk writes."""

    def refresh(self) -> None:
        """Forget the reflected tables (their DDL changed them)."""
        self._target = self._events = self._screened = None
        self._checked.clear()
        self._appends.clear()

    def close(self) -> None:
        """Nothing to end: no thread of its own."""

    def target(self) -> Table:
        """The reflected history table (once)."""
        if self._target is None:
            self._target = reflect_target(self.engine, self.mysql.table)
        return self._target

    def _screen(self, conn: Connection) -> Screen:
        """Rows MySQL cannot be sent or would change, set aside (screen.py)."""
        if self._screened is None:
            self._screened = target_screen(conn, self.config, self.mysql, self.target())
            self._required = {
                c.name
                for c in self.target().c
                if not c.nullable and c.name not in (START_AT, *self.mysql.key)
            }
        return self._screened

    def events(self, conn: Connection) -> Table:
        """The events table as it is, read on the batch's connection (made at
        start: no DDL in a batch)."""
        if self._events is None:
            try:
                self._events = Table(
                    events_table(self.mysql), MetaData(), autoload_with=conn
                )
            except NoSuchTableError:
                raise TerminalError(
                    f"the events table {events_table(self.mysql)} is gone; the "
                    "next start makes it again",
                    table=self.mysql.table,
                ) from None
        return self._events

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
        for chunk in coalesced(chunks, self.config.wal.chunk_rows):
            fit = screen.fit(chunk.schema)
            fit.refuse()
            say_warnings(self.config.sink.id, fit)
            screened = screen(chunk)
            rows = python_rows(screened.chunk)
            applied += AppliedRows(set_aside=screened.set_aside)
            applied += self._chunk(conn, rows, screened.chunk.schema.names)
            done += screened.read
            if on_chunk is not None:
                on_chunk(done, total)
        return applied

    def _chunk(
        self,
        conn: Connection,
        rows: list[dict[str, Any]],
        names: list[str],
    ) -> AppliedRows:
        mysql, cdc = self.mysql, self.config.cdc
        events = self.events(conn)
        if frozenset(names) not in self._checked:
            check_writes(conn, self.config, mysql, names)  # as the start does
            self._checked.add(frozenset(names))
        written = [n for n in names if n in events.c and n not in (SEQUENCE, OP)]
        bad: list[Entry] = []
        rows = drop_non_finite(drop_null_keys(rows, mysql.key, bad), bad)
        recorded: dict[int, dict[str, Any]] = {}
        params = []
        for row in rows:
            version = row.get(mysql.version_column)
            if version is None:
                reason = f"a history record needs a version ({mysql.version_column} "
                bad.append(Entry(row, reason + "is NULL)"))
                continue
            removes = cdc is not None and row.get(cdc.op_column) in cdc.delete_values
            nulls = [c for c in written if c in self._required and row.get(c) is None]
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
        token counts what the chunk added)."""
        events = self.events(conn)
        token = uuid.uuid4().hex
        for event in params:
            event[APPLIED_BY] = token
        bad: list[Entry] = []
        stmt = insert(events)
        # an event seen again changes nothing; a delete replaces an upsert at its
        # sequence (left to right: the op last, as MySQL sees earlier results)
        # (literals, not parameters: executemany sends one set per row)
        replaces = and_(
            stmt.inserted[OP] == literal_column(f"'{DELETE}'"),
            events.c[OP] == literal_column(f"'{UPSERT}'"),
        )
        stmt = stmt.on_duplicate_key_update(
            [
                (
                    APPLIED_BY,
                    func.if_(replaces, stmt.inserted[APPLIED_BY], events.c[APPLIED_BY]),
                ),
                (OP, func.if_(replaces, stmt.inserted[OP], events.c[OP])),
            ]
        )
        isolating(conn, stmt, params, bad)
        refused_ids = {id(e.record) for e in bad}
        keys = {
            tuple(e[k] for k in self.mysql.key)
            for e in params
            if id(e) not in refused_ids
        }
        set_aside = [Entry(recorded[id(e.record)], e.reason) for e in bad]
        if not keys:
            return AppliedRows(set_aside=set_aside)
        appends = self._appends_for(conn, events, written)
        if appends.usable:
            left, new = appends.apply(conn, token)
            if left:
                self._rewrite(conn, events, sorted(left, key=repr), written, token)
        else:
            new = self._rewrite(conn, events, sorted(keys, key=repr), written, token)
        repeated = len(params) - len(bad) - sum(new.values())
        return AppliedRows(new[UPSERT], new[DELETE], repeated, set_aside)

    def _appends_for(
        self, conn: Connection, events: Table, written: list[str]
    ) -> HistoryAppends:
        """The set-based statements for chunks writing ``written`` (made once)."""
        if tuple(written) not in self._appends:
            data = [c for c in written if c not in self.mysql.key]
            self._appends[tuple(written)] = HistoryAppends(
                conn,
                self.target(),
                events,
                self.mysql.key,
                data,
                [c for c in data if self.mysql.tracks(c)],
                self.mysql.ignore_null_updates,
            )
        return self._appends[tuple(written)]

    def _rewrite(
        self,
        conn: Connection,
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
        mysql = self.mysql
        history = self.target()
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
