"""``wal-sink verify --against SOURCE``: a target table against the table that holds
what it should — a Delta table, a Parquet directory, or a MySQL table on the sink's
server — compared by key, in chunks of the key's order:

1. Cut the source into chunks of ``chunk_rows`` rows in the key's order.
2. For each chunk, compare its count and checksum on both sides, each computed where
   its data is (verify_sides.py): nothing but two numbers per chunk leaves MySQL.
3. Narrow each chunk that differs: cut it in parts, compare their sums (one query
   per chunk, grouped by part), and so on down to parts of at most LEAF_ROWS rows;
   read only those, a key and a hash per row, and match them by key across all of
   them (a row the two orders place in different chunks is still found): missing
   in MySQL, extra in MySQL, or different.
4. For a row that differs, name the columns that do, as canonical text
   (verify_canonical.py); text that only the collation's own ``=`` holds equal is
   not a difference.

A history (type 2) holds records, not a state, and an ``add`` column running totals:
there is nothing to compare them with; refused with one line.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from sqlalchemy import Connection, text

from wal_sink.config import Target
from wal_sink.errors import ConfigError
from wal_sink.mysql.identifiers import quoted
from wal_sink.mysql.target_profile import read_columns
from wal_sink.ops.verify_canonical import TEXT, Canonical, canonical
from wal_sink.ops.verify_read import Source, read_arrow
from wal_sink.ops.verify_sides import ArrowSide, Chunk, MysqlSide, Row
from wal_sink.protocol.sink_instance import SinkInstance

log = logging.getLogger(__name__)

MISSING = "missing"
"""In the source, not in MySQL."""
EXTRA = "extra"
"""In MySQL, not in the source."""
DIFFERENT = "different"
"""In both, with other values."""
CHUNK_ROWS = 1_000
PARTS = 10
"""A differing chunk is cut into this many parts, and so on down to LEAF_ROWS."""
LEAF_ROWS = 100
"""A differing part this small is read row by row (a key and a hash each)."""
TEXTS_AT_ONCE = 500
"""Rows that differ whose values are read by one query."""


@dataclass(frozen=True)
class Difference:
    kind: str
    key: dict[str, Any]
    columns: tuple[str, ...] = ()
    """The columns that differ (DIFFERENT)."""
    row: Row | None = field(default=None, compare=False, repr=False)
    """The source's row (MySQL's for EXTRA)."""

    def line(self) -> str:
        key = ", ".join(f"{k}={v!r}" for k, v in self.key.items())
        if self.kind == MISSING:
            return f"missing in MySQL: {key}"
        if self.kind == EXTRA:
            return f"extra in MySQL: {key}"
        return f"different: {key} ({', '.join(self.columns)})"


@dataclass
class TableReport:
    table: str
    source: str
    source_rows: int = 0
    target_rows: int = 0
    chunks: int = 0
    chunks_differing: int = 0
    differences: list[Difference] = field(default_factory=list)
    seconds: float = 0.0
    upserts: list[dict[str, Any]] = field(default_factory=list)
    """With ``with_rows``: the source's rows of the keys missing in MySQL or
    different, their key's and compared columns' values."""
    deletes: list[dict[str, Any]] = field(default_factory=list)
    """With ``with_rows``: the keys extra in MySQL."""

    def count(self, kind: str) -> int:
        return sum(1 for d in self.differences if d.kind == kind)

    def summary(self) -> str:
        return (
            f"table {self.table} against {self.source}: {self.source_rows} row(s) in "
            f"the source, {self.target_rows} in MySQL, {self.chunks} chunk(s) of "
            f"which {self.chunks_differing} differ: {self.count(MISSING)} missing in "
            f"MySQL, {self.count(EXTRA)} extra in MySQL, {self.count(DIFFERENT)} "
            f"different ({self.seconds:.1f} s)"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "source": self.source,
            "source_rows": self.source_rows,
            "target_rows": self.target_rows,
            "chunks": self.chunks,
            "chunks_differing": self.chunks_differing,
            "missing": self.count(MISSING),
            "extra": self.count(EXTRA),
            "different": self.count(DIFFERENT),
            "differences": [
                {"kind": d.kind, "key": d.key, "columns": list(d.columns)}
                for d in self.differences
            ],
        }


def verify_against(
    sink: SinkInstance,
    source: Source,
    *,
    table: str | None = None,
    columns: tuple[str, ...] = (),
    where: str | None = None,
    chunk_rows: int = CHUNK_ROWS,
    with_rows: bool = False,
) -> list[TableReport]:
    """Compare ``table`` (default: every table of the sink) with its source; with
    ``with_rows``, each report also holds what would make MySQL the source's
    (``upserts``, ``deletes``: verify_repair.py)."""
    targets = sink.config.mysql.targets
    if table is not None:
        targets = [t for t in targets if t.table == table]
        if not targets:
            names = ", ".join(t.table for t in sink.config.mysql.targets)
            raise ConfigError(
                f"--table {table}: the sink writes no such table ({names})"
            )
    several = len(targets) > 1
    for target in targets:
        _refuse_records(target)
    with sink.engine.connect() as conn:
        return [
            _compare(
                sink,
                conn,
                target,
                source.of(target.table, several),
                columns,
                where,
                chunk_rows,
                with_rows,
            )
            for target in targets
        ]


def _refuse_records(target: Target) -> None:
    if target.scd_type == 2:
        raise ConfigError(
            f"{target.table} is a history (stored_as_scd_type = 2): its rows are "
            "records of each key's past, not a state a source holds; verify "
            "--against compares states"
        )


def _compare(
    sink: SinkInstance,
    conn: Connection,
    target: Target,
    source: Source,
    wanted: tuple[str, ...],
    where: str | None,
    chunk_rows: int,
    with_rows: bool,
) -> TableReport:
    started = time.monotonic()
    report = TableReport(target.table, source.location)
    facts = read_columns(conn, target.table)
    if not facts:
        raise ConfigError(f"the target table {target.table} does not exist")
    names = source.column_names(sink, conn)
    key, columns = _columns(
        target, facts, _json_columns(conn, target.table), names, wanted
    )
    q = lambda n: quoted(conn.dialect, n)  # noqa: E731
    with sink.engine.connect() as own:
        mine = MysqlSide(own, q(target.table), key, columns, where)
        other: MysqlSide | ArrowSide
        if source.database is not None:
            name = f"{q(source.database)}.{q(source.table)}"
            other = MysqlSide(conn, name, key, columns, where)
        else:
            renames = {names[c.name.lower()]: c.name for c in [*key, *columns]}
            arrow = read_arrow(source, sink.wal.storage, list(renames), where)
            arrow = arrow.rename_columns([renames[n] for n in arrow.column_names])
            other = ArrowSide(_utc(arrow), key, columns)
        # Step 1. The source's chunks; step 2, their sums on both sides at once.
        chunks = other.chunks(chunk_rows)
        with ThreadPoolExecutor(1) as pool:
            ours_later = pool.submit(mine.sums, chunks)
            theirs_now = other.sums(chunks)
            ours_now = ours_later.result()
        report.chunks = len(chunks)
        report.source_rows = sum(c for c, _ in theirs_now)
        report.target_rows = sum(c for c, _ in ours_now)
        # Step 3. Differing chunks, narrowed to parts of at most LEAF_ROWS rows.
        differing = [
            (c, a[0])
            for c, a, b in zip(chunks, theirs_now, ours_now, strict=True)
            if a != b
        ]
        report.chunks_differing = len(differing)
        theirs: dict[str, Row] = {}
        ours: dict[str, Row] = {}
        for leaf in _narrowed(mine, other, differing):
            theirs.update((r.key_text, r) for r in other.rows(leaf))
            ours.update((r.key_text, r) for r in mine.rows(leaf))
        # Step 4. What differs, and in which columns.
        report.differences = _differences(key, columns, mine, other, theirs, ours)
        if with_rows:
            found = report.differences
            wanted = [d.row for d in found if d.kind != EXTRA and d.row is not None]
            for at in range(0, len(wanted), TEXTS_AT_ONCE):
                some = wanted[at : at + TEXTS_AT_ONCE]
                report.upserts += other.values(some).values()
            report.deletes = [
                {c.name: v for c, v in zip(key, d.row.key, strict=True)}
                for d in found
                if d.kind == EXTRA and d.row is not None
            ]
    report.seconds = time.monotonic() - started
    log.info("%s", report.summary())
    return report


def _narrowed(
    mine: MysqlSide,
    other: MysqlSide | ArrowSide,
    differing: list[tuple[Chunk, int]],
) -> Iterator[Chunk]:
    """The parts of the ``differing`` chunks (with their source row counts) that
    differ, each of at most LEAF_ROWS source rows (or no longer divisible): each
    chunk cut in PARTS parts, their sums asked of each side by one query."""
    while differing:
        chunk, count = differing.pop()
        parts = other.split(chunk, count, PARTS) if count > LEAF_ROWS else [chunk]
        if len(parts) == 1:
            yield chunk
            continue
        theirs = other.sums_within(chunk, parts)
        ours = mine.sums_within(chunk, parts)
        differing += [
            (p, a[0]) for p, a, b in zip(parts, theirs, ours, strict=True) if a != b
        ]


def _differences(
    key: list[Canonical],
    columns: list[Canonical],
    mine: MysqlSide,
    other: MysqlSide | ArrowSide,
    theirs: dict[str, Row],
    ours: dict[str, Row],
) -> list[Difference]:
    def named(row: Row) -> dict[str, Any]:
        return {c.name: _plain(v) for c, v in zip(key, row.key, strict=True)}

    found = [
        Difference(MISSING, named(r), row=r) for k, r in theirs.items() if k not in ours
    ]
    found += [
        Difference(EXTRA, named(r), row=r) for k, r in ours.items() if k not in theirs
    ]
    changed = [k for k, r in theirs.items() if k in ours and ours[k].hash != r.hash]
    for at in range(0, len(changed), TEXTS_AT_ONCE):
        some = changed[at : at + TEXTS_AT_ONCE]
        here = mine.texts([ours[k] for k in some])
        there = other.texts([theirs[k] for k in some])
        for k in some:
            differ = tuple(
                c.name
                for c, a, b in zip(columns, there[k], here[k], strict=True)
                if a != b and not _collated_equal(mine, c, a, b)
            )
            if differ:
                found.append(Difference(DIFFERENT, named(theirs[k]), differ, theirs[k]))
    order = {MISSING: 0, EXTRA: 1, DIFFERENT: 2}
    return sorted(found, key=lambda d: (order[d.kind], tuple(d.key.values())))


def _collated_equal(mine: MysqlSide, c: Canonical, a: Any, b: Any) -> bool:
    """Text the canonical foldings tell apart but the collation's ``=`` does not."""
    if c.kind != TEXT or a is None or b is None or c.collation is None:
        return False
    return mine.equal_as_collated(c, a, b)


def _columns(
    target: Target,
    facts: dict[str, Any],
    json_columns: set[str],
    source: dict[str, str],
    wanted: tuple[str, ...],
) -> tuple[list[Canonical], list[Canonical]]:
    """The key and the columns compared: ``wanted``, or every column of the
    target the source has too."""
    key_names = {k.lower() for k in target.key}
    for k in key_names:
        if k not in source:
            raise ConfigError(f"the source has no column {k}, of {target.table}'s key")
    if wanted:
        unknown = [
            c for c in wanted if c.lower() not in facts or c.lower() not in source
        ]
        if unknown:
            raise ConfigError(
                f"--columns {', '.join(unknown)}: not a column of both "
                f"{target.table} and the source"
            )
        chosen = [c.lower() for c in wanted if c.lower() not in key_names]
    else:
        chosen = [n for n in facts if n in source and n not in key_names]
    added = {c.lower() for c, mode in target.merge.items() if mode == "add"}
    adds = [n for n in chosen if n in added]
    if adds:
        raise ConfigError(
            f"{target.table}.{adds[0]} is an `add` column: it holds a running total, "
            "not a value a source holds; leave it out with --columns"
        )

    def spelt(n: str) -> Canonical:
        f = facts[n]
        return canonical(f.name, f.data_type, f.collation, n in json_columns)

    return [spelt(k.lower()) for k in target.key], [spelt(n) for n in chosen]


def _json_columns(conn: Connection, table: str) -> set[str]:
    """MariaDB's JSON columns of ``table`` (LONGTEXT checked by json_valid), by
    lower-case name."""
    return {
        str(n).lower()
        for n in conn.execute(
            text(
                "SELECT CONSTRAINT_NAME FROM information_schema.CHECK_CONSTRAINTS "
                "WHERE CONSTRAINT_SCHEMA = DATABASE() AND TABLE_NAME = :t "
                "AND CHECK_CLAUSE LIKE 'json_valid(%'"
            ),
            {"t": table},
        ).scalars()
    }


def _utc(table: pa.Table) -> pa.Table:
    """Timestamps in a zone as the UTC instants they are (the keys are bound as
    naive values, as the sink writes them)."""
    for i, f in enumerate(table.schema):
        if pa.types.is_timestamp(f.type) and f.type.tz is not None:
            naive = table.column(i).cast(pa.timestamp("us", f.type.tz), safe=False)
            table = table.set_column(i, f.name, naive.cast(pa.timestamp("us")))
    return table


def _plain(value: Any) -> Any:
    """A key value as JSON can carry it."""
    if isinstance(value, (int, str, float, bool)) or value is None:
        return value
    return str(value)
