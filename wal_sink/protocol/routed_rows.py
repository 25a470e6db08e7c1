"""A staged batch's rows applied to the sink's target tables, inside the batch's one
transaction (Step 3, docs/protocol.md): one row applier per table (batch_rows.py).

With one table the batch goes to it as it is. With ``mysql.route_column`` each row
goes to the table its route names (docs/merge.md, "One stream, several tables"):

- the batch keeps its one staged order (``cdc.order_by`` with CDC): it is cut into
  runs of consecutive upserts and of consecutive deletes, in order;
- within a run of upserts the tables go parents first, within a run of deletes
  children first, as their foreign keys say (mysql/table_order.py); each table's
  rows keep their staged order and go to its applier together, so the fast paths
  see a table's rows of the whole run, not a mixed chunk's;
- a table takes the stream's columns it has (or its ``columns``), the CDC op column
  too; every other stream column must belong to some table, or the batch is
  refused (ConfigError) before anything of it is applied. Names match ignoring
  case, as MySQL's do: a table's rows go to its applier in the table's spelling,
  with the config's names spelt so (config/spelling.py);
- a row whose route is NULL or names no table is set aside with that reason, its
  record whole.

A run is held in memory up to ``mysql.max_transaction_rows`` rows; a longer one (a
large batch of upserts is one run) is read again from the WAL once per table, so
memory stays bounded whatever the batch's size. Rows set aside keep their route, so
``quarantine retry`` routes them again, in the same parent-child order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
from sqlalchemy import Connection, Engine

from wal_sink.config import Config, Target
from wal_sink.config.spelling import (
    Spelling,
    not_excepted,
    refuse_twins,
    spelled_config,
    spelled_target,
)
from wal_sink.mysql.acks import TableCounts
from wal_sink.mysql.row_screen import row_record
from wal_sink.mysql.table_order import parents_first
from wal_sink.mysql.target_profile import read_columns
from wal_sink.protocol.batch_rows import ChunkCallback, RowApplier
from wal_sink.protocol.chunk_path import AppliedRows
from wal_sink.protocol.history_rows import HistoryApplier
from wal_sink.protocol.table_columns import in_spelling, renamed, tables_columns
from wal_sink.wal.model import StagedBatch
from wal_sink.wal.quarantine import Entry
from wal_sink.wal.reader import WalReader

STRAY = ""
"""The per-table counts' name for rows whose route names no table."""
Read = Callable[[], Iterator[pa.RecordBatch]]


@dataclass
class _Run:
    """Consecutive rows of one kind (upserts or deletes) at positions
    ``start`` .. ``end`` of the batch; their parts per table while held."""

    deletes: bool
    start: int
    end: int = 0
    parts: dict[str, list[pa.RecordBatch]] = field(default_factory=dict)
    held: int = 0
    reread: bool = False
    """Too long to hold: read again from the batch, one table at a time."""


class BatchRows:
    """Applies staged batches' rows to the tables of one sink."""

    def __init__(self, config: Config, engine: Engine, wal: WalReader) -> None:
        self.config = config
        self.engine = engine
        self.wal = wal
        self.targets = {t.table: t for t in config.mysql.targets}
        self.appliers = {
            t: applier_for(config, target, engine) for t, target in self.targets.items()
        }
        self.route_column = config.mysql.route_column
        self._by_route = {a.mysql.route: a for a in self.appliers.values()}
        cdc = config.cdc
        self._ours = Spelling(
            c for c in (cdc.op_column if cdc else None, self.route_column) if c
        )
        """The columns routing reads, as the config spells them."""
        self._spellings: dict[str, Spelling] | None = None
        """Each table's columns as it spells them, once read (``_spell``)."""
        self._order: list[str] | None = None
        self._columns: dict[tuple[str, ...], dict[str, list[str]]] = {}
        self.hold = config.mysql.max_transaction_rows
        self.table_at: str | None = None
        """The table being written when a statement failed: the one its error names."""

    def refresh(self) -> None:
        """Forget what was read of the tables (after their DDL changed them)."""
        for applier in self.appliers.values():
            applier.refresh()
        self._columns.clear()
        self._spellings = None

    def _spell(self, conn: Connection) -> dict[str, Spelling]:
        """Each table's spelling of its columns (and the config's of the op and
        route columns), read once, and again after ``refresh`` (a table auto_create
        made meanwhile). An applier whose table spells a name the config names
        otherwise is made again, with the config's names spelt as the table does."""
        if self._spellings is None:
            self._spellings = {}
            for table, target in self.targets.items():
                names = [f.name for f in read_columns(conn, table).values()]
                spelling = Spelling([*names, *self._ours])
                self._spellings[table] = spelling
                config = spelled_config(self.config, spelling)
                spelled = spelled_target(target, spelling)
                if _named(config, spelled) != _named(*self._made(table)):
                    self.appliers[table].close()
                    self.appliers[table] = applier_for(config, spelled, self.engine)
            self._by_route = {a.mysql.route: a for a in self.appliers.values()}
        return self._spellings

    def _made(self, table: str) -> tuple[Config, Target]:
        applier = self.appliers[table]
        return applier.config, applier.mysql

    def _single(
        self,
        conn: Connection,
        chunks: Iterator[pa.RecordBatch],
        total: int,
        on_chunk: ChunkCallback | None,
        stream: Sequence[str] | None,
    ) -> AppliedRows:
        """The one table's rows, in its spelling."""
        (table,) = self.targets
        (target,) = self.config.mysql.targets
        spelling = self._spell(conn)[table]
        self.table_at = table
        if stream is not None:
            refuse_twins(stream, table)
            stream = [spelling.of(c) for c in not_excepted(target, stream)]
        if target.except_columns:
            chunks = (c.select(not_excepted(target, c.schema.names)) for c in chunks)
        return self.appliers[table].apply_chunks(
            conn, in_spelling(chunks, spelling, table), total, on_chunk, stream
        )

    def close(self) -> None:
        """End the appliers' prefetch threads; once no batch is being applied."""
        for applier in self.appliers.values():
            applier.close()

    def apply(
        self, conn: Connection, batch: StagedBatch, on_chunk: ChunkCallback | None
    ) -> AppliedRows:
        """Apply the batch's rows in staged order (routed to their tables)."""

        def read() -> Iterator[pa.RecordBatch]:
            return self.wal.read_batch(batch, self.config.wal.chunk_rows)

        if self.route_column is None:
            applied = self._single(conn, read(), batch.rows, on_chunk, None)
        else:
            applied = self._routed(conn, read, batch.rows, on_chunk, None)
        self.table_at = None
        return applied

    def apply_chunks(
        self,
        conn: Connection,
        chunks: Iterator[pa.RecordBatch],
        total: int,
        stream: Sequence[str] | None = None,
    ) -> AppliedRows:
        """Apply ``chunks`` (rows of some of ``stream``'s columns: a quarantine
        retry's records) as a staged batch's."""
        if self.route_column is None:
            return self._single(conn, chunks, total, None, stream)
        held = list(chunks)  # a retry's entries of one batch
        return self._routed(conn, lambda: iter(held), total, None, stream)

    def _routed(
        self,
        conn: Connection,
        read: Read,
        total: int,
        on_chunk: ChunkCallback | None,
        stream: Sequence[str] | None,
    ) -> AppliedRows:
        order = self._parents_first(conn)
        self._spell(conn)
        given = read

        def read() -> Iterator[pa.RecordBatch]:  # the op and route as configured
            return (renamed(chunk, self._ours) for chunk in given())

        counts = _Counts()
        run: _Run | None = None
        position = 0
        for chunk in read():
            self._table_columns(chunk.schema.names, stream)  # refused before any
            for deletes, start, length in self._segments(chunk):
                if run is not None and run.deletes != deletes:
                    self._flush(conn, run, order, read, stream, counts)
                    self._progress(on_chunk, counts, total)
                    run = None
                if run is None:
                    run = _Run(deletes, position + start)
                run.end = position + start + length
                piece = chunk.slice(start, length)
                if run.reread:
                    self._by_table(piece, counts)  # its strays: set aside
                else:
                    self._hold(run, piece, counts)
            position += chunk.num_rows
        if run is not None:
            self._flush(conn, run, order, read, stream, counts)
            self._progress(on_chunk, counts, total)
        return counts.result()

    def _segments(self, chunk: pa.RecordBatch) -> Iterator[tuple[bool, int, int]]:
        """The chunk's stretches of upserts and of deletes (and truncates, which
        go children first as deletes do): (deletes, start, rows)."""
        cdc = self.config.cdc
        if cdc is None or chunk.num_rows == 0:
            yield False, 0, chunk.num_rows
            return
        kinds = pc.fill_null(
            pc.is_in(chunk.column(cdc.op_column), pa.array(cdc.removing)), False
        ).to_pylist()
        start = 0
        for i in range(1, len(kinds) + 1):
            if i == len(kinds) or kinds[i] != kinds[start]:
                yield kinds[start], start, i - start
                start = i

    def _hold(self, run: _Run, piece: pa.RecordBatch, counts: _Counts) -> None:
        """Keep ``piece``'s rows with the run, by table; strays set aside now."""
        for table, rows in self._by_table(piece, counts).items():
            run.parts.setdefault(table, []).append(rows)
            run.held += rows.num_rows
        if run.held > self.hold:
            run.reread, run.parts = True, {}

    def _by_table(
        self, piece: pa.RecordBatch, counts: _Counts
    ) -> dict[str, pa.RecordBatch]:
        """``piece``'s rows of each table (all the stream's columns); rows whose
        route names no table go to ``counts`` as set aside."""
        route = piece.column(self.route_column)
        if not pa.types.is_string(route.type):  # routes are text in the config
            route = pc.cast(route, pa.string())
        found: dict[str, pa.RecordBatch] = {}
        named = pa.array([False] * piece.num_rows)
        for value, applier in self._by_route.items():
            mask = pc.fill_null(pc.equal(route, pa.scalar(value, pa.string())), False)
            if pc.any(mask).as_py():
                found[applier.mysql.table] = piece.filter(mask)
                named = pc.or_(named, mask)
        for i in pc.indices_nonzero(pc.invert(named)).to_pylist():
            value = route[i].as_py()
            why = "its route is NULL" if value is None else f"route {value!r}"
            counts.stray(
                Entry(row_record(piece, i), f"{why} names no table of mysql.tables")
            )
        return found

    def _flush(
        self,
        conn: Connection,
        run: _Run,
        order: list[str],
        read: Read,
        stream: Sequence[str] | None,
        counts: _Counts,
    ) -> None:
        """Apply the run's rows table by table: parents first for upserts,
        children first for deletes, each with the columns it takes."""
        for table in reversed(order) if run.deletes else order:
            if run.reread:
                parts: Iterator[pa.RecordBatch] = self._reread(read, run, table)
                rows = run.end - run.start
            else:
                held = run.parts.get(table, [])
                parts, rows = iter(held), sum(p.num_rows for p in held)
                if not rows:
                    continue
            applier = self.appliers[table]
            spelling = self._spell(conn)[table]
            self.table_at = table
            applied = applier.apply_chunks(
                conn,
                (
                    renamed(
                        p.select(self._taken(p.schema.names, stream, table)), spelling
                    )
                    for p in parts
                ),
                rows,
                stream=None
                if stream is None
                else [spelling.of(c) for c in self._taken(stream, stream, table)],
            )
            counts.add(table, applied, self.route_column, applier.mysql.route)

    def _reread(self, read: Read, run: _Run, table: str) -> Iterator[pa.RecordBatch]:
        """The run's rows of ``table``, read again from the batch."""
        position = 0
        ignore = _Counts()  # strays were set aside on the first pass
        for chunk in read():
            first, last = max(run.start - position, 0), run.end - position
            position += chunk.num_rows
            if last <= 0 or first >= chunk.num_rows:
                continue
            piece = chunk.slice(first, min(last, chunk.num_rows) - first)
            rows = self._by_table(piece, ignore).get(table)
            if rows is not None:
                yield rows

    def _table_columns(
        self, names: Sequence[str], stream: Sequence[str] | None
    ) -> dict[str, list[str]]:
        """The columns each table takes of a schema's ``names`` (tables_columns);
        the check against the stream is made once per schema."""
        known = self._columns.get(tuple(names))
        if known is None:
            have = {t: a.target().c.keys() for t, a in self.appliers.items()}
            known = tables_columns(self.config, have, names, stream)
            self._columns[tuple(names)] = known
        return known

    def _taken(
        self, names: Sequence[str], stream: Sequence[str] | None, table: str
    ) -> list[str]:
        """The columns ``table`` takes of ``names`` (tables_columns)."""
        return self._table_columns(names, stream)[table]

    def _parents_first(self, conn: Connection) -> list[str]:
        if self._order is None:
            self._order = parents_first(
                conn, list(self.appliers), self.config.mysql.table_order
            )
        return self._order

    def _progress(
        self, on_chunk: ChunkCallback | None, counts: _Counts, total: int
    ) -> None:
        if on_chunk is not None:
            on_chunk(min(counts.done, total), total)


class _Counts:
    """What a routed batch did, in all and per table."""

    def __init__(self) -> None:
        self.tables: dict[str, TableCounts] = {}
        self.set_aside: list[Entry] = []
        self.done = 0

    def add(
        self, table: str, applied: AppliedRows, route_column: str, route: str
    ) -> None:
        self.tables[table] = self.tables.get(table, TableCounts()) + TableCounts(
            applied.upserted, applied.deleted, applied.skipped, len(applied.set_aside)
        )
        # set-aside records keep their route, so a retry routes them again
        self.set_aside += [
            Entry({**e.record, route_column: route}, e.reason)
            if route_column not in e.record
            else e
            for e in applied.set_aside
        ]
        self.done += applied.upserted + applied.deleted + applied.skipped
        self.done += len(applied.set_aside)

    def stray(self, entry: Entry) -> None:
        self.set_aside.append(entry)
        known = self.tables.get(STRAY, TableCounts())
        self.tables[STRAY] = known + TableCounts(set_aside=1)
        self.done += 1

    def result(self) -> AppliedRows:
        return AppliedRows(
            upserted=sum(t.upserted for t in self.tables.values()),
            deleted=sum(t.deleted for t in self.tables.values()),
            skipped=sum(t.skipped for t in self.tables.values()),
            set_aside=self.set_aside,
            tables=dict(self.tables),
        )


def applier_for(
    config: Config, target: Target, engine: Engine
) -> RowApplier | HistoryApplier:
    """The applier of ``target``: a row per key, or a history (type 2)."""
    if target.scd_type == 2:
        return HistoryApplier(config, target, engine)
    return RowApplier(config, target, engine)


def _named(config: Config, target: Target) -> tuple[object, ...]:
    """The names an applier holds of the config's."""
    order = config.cdc.order_by if config.cdc else None
    return target.key, target.merge, target.version_column, target.columns, order
