"""Applying one staged batch's rows inside the open batch transaction (Step 3 of
the commit, docs/protocol.md), in staged order and in bounded chunks.

A chunk goes as multi-row INSERTs rendered in Arrow (or through LOAD DATA with
``mysql.local_infile``); one that cannot be rendered exactly, or that MySQL rejects,
goes row by row, value by value (row_by_row.py). Rows MySQL cannot be sent
(screen.py), rows with a null key, NaN or infinity, and rows whose values MySQL
rejects (isolated under savepoints by bisecting the chunk) are set aside for the
quarantine; the rest of the batch is applied.

MySQL executing a chunk's statements and the client reading and rendering the next
chunk overlap: one chunk ahead is read from the WAL, its way decided (chunk_path.py)
and, on the multi-row path, rendered on a thread of its own while the current one
executes. Small files of a batch are joined into chunks of up to ``wal.chunk_rows``
rows, and statements are built once per schema, not per batch: a backlog of small
batches costs fewer round trips.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from sqlalchemy import Connection, Delete, Engine, Table
from sqlalchemy.dialects.mysql import Insert
from sqlalchemy.exc import DBAPIError

from wal_sink.config import Config, Target
from wal_sink.mysql.bulk_load import BulkLoader
from wal_sink.mysql.escaping import renders_exactly
from wal_sink.mysql.multi_row import MultiRowUpsert
from wal_sink.mysql.target import reflect_target
from wal_sink.mysql.target_profile import deletes_may_fail, read_profile
from wal_sink.mysql.unique_keys import AnotherRow
from wal_sink.mysql.upsert import (
    build_delete,
    build_stored,
    build_update,
    build_upsert,
    build_values_check,
)
from wal_sink.mysql.value_fit import say_warnings
from wal_sink.mysql.write_checks import check_writes
from wal_sink.protocol.chunk_path import AppliedRows, ChunkPaths, Decision
from wal_sink.protocol.chunk_stream import coalesced, prefetched
from wal_sink.protocol.row_by_row import (
    ByKeyColumns,
    ByKeyWay,
    drop_non_finite,
    drop_null_keys,
    isolating,
    needs_update,
    python_rows,
    refused,
    split_runs,
    updating,
)
from wal_sink.protocol.screen import Screen, Screened, target_screen
from wal_sink.protocol.versioned_cdc import Piece, VersionedCdc
from wal_sink.wal.quarantine import Entry

log = logging.getLogger(__name__)

ChunkCallback = Callable[[int, int], None]
"""Called after each applied chunk with (rows so far, rows in the batch)."""


class RowApplier:
    """Applies rows to one target table of a sink (``target``)."""

    def __init__(self, config: Config, target: Target, engine: Engine) -> None:
        self.config = config
        self.mysql = target
        self.engine = engine
        self.sink_id = config.sink.id
        self._target: Table | None = None
        self._screen: Screen | None = None
        self.paths = ChunkPaths(self.sink_id, target.key)
        """Which way each chunk goes, and the ladder down when one fails it."""
        self._by_schema: list[_Statements] = []
        self._another_row: AnotherRow | None = None
        self.versioned = (
            VersionedCdc(config, target)
            if config.cdc and target.version_column
            else None
        )
        """Stale upserts and tombstones, with [cdc] and a version column."""
        self._prefetch = ThreadPoolExecutor(1, thread_name_prefix="wal-sink-prefetch")
        """Reads (and renders) the next chunk while MySQL executes the current."""

    def refresh(self) -> None:
        """Forget the reflected table and the statements built for it (its DDL
        changed it)."""
        self._target = None
        self._screen = None
        self._by_schema.clear()
        self._another_row = None

    def close(self) -> None:
        """End the prefetch thread; called once no batch is being applied."""
        self._prefetch.shutdown()

    def target(self) -> Table:
        """The reflected target table (once); refuses tables that are not InnoDB."""
        if self._target is None:
            self._target = reflect_target(self.engine, self.mysql.table)
        return self._target

    def apply_chunks(
        self,
        conn: Connection,
        chunks: Iterator[pa.RecordBatch],
        total: int,
        on_chunk: ChunkCallback | None = None,
        stream: Sequence[str] | None = None,
    ) -> AppliedRows:
        """Apply ``chunks`` (``total`` rows of the stream's columns, or of some of
        ``stream``'s) in order, as a staged batch's. What the target may take is
        checked against ``stream`` (default: each chunk's columns)."""
        self.paths.render = renders_exactly(conn, self.sink_id)
        rows = deleted = skipped = done = 0
        bad: list[Entry] = []
        chunk_rows = self.config.wal.chunk_rows
        chunks = map(self._screened(conn), coalesced(chunks, chunk_rows))
        for screened, ahead in prefetched(chunks, self._decide_ahead, self._prefetch):
            chunk = screened.chunk
            bad.extend(screened.set_aside)
            found = self._statements(conn, chunk.schema, stream)
            late = screened.late
            applied = self.paths.apply(
                conn,
                chunk,
                found,
                ahead,
                lambda: self._row_by_row(conn, found, chunk, late),
            )
            rows += applied.upserted
            deleted += applied.deleted
            skipped += applied.skipped
            bad += applied.set_aside
            done += screened.read
            if on_chunk is not None:
                on_chunk(done, total)
        return AppliedRows(rows, deleted, skipped, bad)

    def _row_by_row(
        self,
        conn: Connection,
        found: _Statements,
        chunk: pa.RecordBatch,
        late: dict[int, Entry],
    ) -> AppliedRows:
        """The chunk row by row, value by value: the last way down. ``late``: rows
        (by index) the screen left to set aside unless they are stale."""
        rows = deleted = skipped = 0
        bad: list[Entry] = []
        for piece in self._pieces(conn, found, chunk, late):
            skipped += piece.stale
            bad += piece.set_aside
            deleted += piece.truncated
            upserted, removed = self._apply_rows(conn, found, piece.rows, bad)
            rows += upserted
            deleted += removed
        return AppliedRows(rows, deleted, skipped, bad)

    def _pieces(
        self,
        conn: Connection,
        found: _Statements,
        chunk: pa.RecordBatch,
        late: dict[int, Entry],
    ) -> Iterator[Piece]:
        """The chunk's rows as Python values, with how many were dropped as stale and
        the rows set aside doing so: whole, or with versioned CDC in pieces of one
        tombstone read each (each read once the piece before it is applied). The
        ``late`` rows are set aside where they are not stale."""
        values = python_rows(chunk)
        held = {id(values[i]): entry for i, entry in late.items()}
        if found.versioned is None:
            yield Piece(
                [v for v in values if id(v) not in held], 0, list(held.values())
            )
            return
        for piece in found.versioned.pieces(
            conn, values, cut_after_deletes=found.deletes_may_fail
        ):
            piece.set_aside += [held[id(r)] for r in piece.rows if id(r) in held]
            piece.rows = [r for r in piece.rows if id(r) not in held]
            yield piece

    def _apply_rows(
        self,
        conn: Connection,
        found: _Statements,
        values: list[dict[str, Any]],
        bad: list[Entry],
    ) -> tuple[int, int]:
        """Rows applied row by row, in order, in runs of upserts and deletes;
        returns (upserted, deleted)."""
        mysql, cdc = self.mysql, self.config.cdc
        rows = deleted = 0
        for is_delete, run, ops in split_runs(
            values,
            cdc.op_column if cdc else None,
            cdc.delete_values if cdc else (),
        ):
            before = len(bad)
            # a delete's row by its statement's parameters (key and version): a
            # delete set aside keeps its row whole, as an upsert does
            whole: dict[int, dict[str, Any]] = {}
            run = drop_null_keys(run, mysql.key, bad)
            if is_delete:
                by = mysql.key
                if found.versioned is not None:  # tombstones: versioned_cdc.py
                    by = (*by, found.versioned.version)
                params = [{k: r[k] for k in by} for r in run]
                ops.update({id(p): ops[id(r)] for p, r in zip(params, run)})
                whole.update({id(p): r for p, r in zip(params, run)})
                params = drop_non_finite(params, bad)
                refused_before = len(bad)
                deleted += isolating(conn, found.delete, params, bad)
                if found.versioned is not None:
                    refused = {id(e.record) for e in bad[refused_before:]}
                    found.versioned.record(
                        conn, [p for p in params if id(p) not in refused]
                    )
            else:
                for by_key, segment in needs_update(
                    drop_non_finite(run, bad), found.by_key
                ):
                    if by_key and found.by_key_way is not None:
                        rows += updating(
                            conn,
                            found.by_key_way,
                            found.upsert,
                            segment[0],
                            bad,
                            self._upsert_refused,
                        )
                    else:
                        rows += isolating(
                            conn, found.upsert, segment, bad, self._upsert_refused
                        )
            if cdc and len(bad) > before:  # set-aside records keep their op
                run_op = cdc.delete_values[0] if is_delete else None
                bad[before:] = [
                    Entry(
                        {
                            **whole.get(id(e.record), e.record),
                            cdc.op_column: ops.get(id(e.record), run_op),
                        },
                        e.reason,
                    )
                    for e in bad[before:]
                ]
        return rows, deleted

    def _screened(self, conn: Connection) -> Screen:
        """The screen of chunks (once: it reads the server's max_allowed_packet)."""
        if self._screen is None:
            columns = read_profile(conn, self.mysql.table).columns
            self._screen = target_screen(
                conn,
                self.config,
                self.mysql,
                self.target(),
                defer=self.versioned is not None,
                kept_nulls=frozenset(
                    f.name
                    for f in columns.values()
                    if (way := self.mysql.mode(f.name).by_key(f)) and way.held(None)
                ),
            )
        return self._screen

    def _statements(
        self, conn: Connection, schema: pa.Schema, stream: Sequence[str] | None
    ) -> _Statements:
        """How chunks of ``schema`` are applied; built once per schema (statements
        compiled per batch were a tenth of applying a backlog of small batches)."""
        found = self._known(schema)
        if found is not None:
            return found
        mysql, cdc = self.mysql, self.config.cdc
        target = self.target()
        columns = [c for c in schema.names if not cdc or c != cdc.op_column]
        profile = check_writes(
            conn, self.config, mysql, schema.names if stream is None else stream
        )
        fit = self._screened(conn).fit(schema)
        fit.refuse()
        say_warnings(self.sink_id, fit)
        upsert = build_upsert(target, columns, mysql)
        by_key = tuple(
            (c, way)
            for c in columns
            if (facts := profile.column(c)) is not None
            and (way := mysql.mode(c).by_key(facts)) is not None
        )
        multi = loader = None
        if not cdc:
            multi = MultiRowUpsert.for_schema(conn, upsert, columns, schema)
            if self.config.mysql.local_infile and BulkLoader.supports(conn, schema):
                loader = BulkLoader(target, columns, mysql, self.sink_id)
        versioned = self.versioned if cdc and mysql.version_column in columns else None
        delete = build_delete(target, mysql, versioned is not None) if cdc else None
        found = _Statements(
            schema,
            upsert,
            multi,
            loader,
            delete,
            versioned,
            deletes_may_fail(profile),
            ByKeyWay(
                by_key,
                build_update(target, columns, mysql),
                build_values_check(target, columns, mysql),
                build_stored(target, [c for c, _ in by_key], mysql),
            )
            if by_key
            else None,
        )
        self._by_schema.append(found)
        return found

    def _known(self, schema: pa.Schema) -> _Statements | None:
        for known in self._by_schema:  # one per schema the WAL ever had: a few
            if known.schema.equals(schema):
                return known
        return None

    def _upsert_refused(
        self, conn: Connection, row: dict[str, Any], e: DBAPIError
    ) -> str:
        """Why MySQL refused one row's upsert; one that would reach another key's
        row names the index and that row's key."""
        if self._another_row is None:
            self._another_row = AnotherRow(self.target(), self.mysql.key)
        return self._another_row.reason(conn, row, e) or refused(conn, row, e)

    def _decide_ahead(self, screened: Screened) -> Decision | None:
        """On the prefetch thread: the chunk's way (its statements rendered on the
        multi-row path); None when its schema's statements are not built yet (that
        needs the connection)."""
        found = self._known(screened.chunk.schema)
        if found is None:
            return None
        return self.paths.decide(screened.chunk, found)


@dataclass(frozen=True)
class _Statements:
    """What chunks of one schema are applied with."""

    schema: pa.Schema
    upsert: Insert
    """Executed row by row, value by value (the fallback and CDC path)."""
    multi: MultiRowUpsert | None
    loader: BulkLoader | None
    delete: Delete | None
    """CDC deletes by key (guarded by the version when ``versioned``)."""
    versioned: VersionedCdc | None
    """[cdc] rows carrying the version column: stale upserts and tombstones."""
    deletes_may_fail: bool = False
    """A delete can be refused (a child row still referencing it, a trigger, or
    triggers this user cannot see): versioned CDC judges upserts after a run of
    deletes only once it is applied."""
    by_key_way: ByKeyWay | None = None
    """How a row holding a value the upsert's INSERT cannot carry goes by key."""

    @property
    def by_key(self) -> ByKeyColumns:
        """Columns whose merge mode takes values the upsert's INSERT cannot carry,
        with those values (none without ``by_key_way``)."""
        return () if self.by_key_way is None else self.by_key_way.columns
