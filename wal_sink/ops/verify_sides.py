"""The two sides ``wal-sink verify --against`` compares, each answering the same
questions about chunks of keys — their counts and checksums, each row's key and
hash, each row's values as text — where its data is:

- a MySQL table (the target, or a source on the sink's server): the canonical text
  and its hash computed by the server (verify_canonical.py); a chunk is a range of
  the key, read through its index, by one query (or one query for the parts of a
  chunk, grouped by part);
- an Arrow table (a Delta or Parquet source, read whole, only the columns
  compared): sorted by the key once, the texts and hashes computed by pyarrow's
  kernels, a chunk a slice of it.

A chunk is ``(lo, hi]`` in the key's order, ``None`` for no bound; the source's
rows decide where chunks end.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sqlalchemy import Connection, text

from wal_sink.errors import ConfigError
from wal_sink.mysql.identifiers import quoted
from wal_sink.ops.verify_canonical import (
    MOD,
    TEXT,
    Canonical,
    arrow_row,
    arrow_text,
    hashes,
    sql_hash,
    sql_row,
    sql_text,
)

Key = tuple[Any, ...]
Bound = Key | None
Sums = tuple[int, int]
"""A chunk's row count and the sum of its rows' hashes modulo 2**64."""


@dataclass(frozen=True)
class Chunk:
    lo: Bound
    hi: Bound
    start: int = 0
    """Where it starts and stops among the Arrow side's sorted rows."""
    stop: int = 0


@dataclass(frozen=True)
class Row:
    """One row of a chunk: its key as text (matches across sides), hash, raw key,
    and its place among the Arrow side's sorted rows."""

    key_text: str
    hash: int
    key: Key
    at: int = -1


class MysqlSide:
    """A MySQL table (``name``: quoted, qualified where needed) read by key range."""

    def __init__(
        self,
        conn: Connection,
        name: str,
        key: Sequence[Canonical],
        columns: Sequence[Canonical],
        where: str | None,
    ) -> None:
        self.conn = conn
        self.name = name
        self.key = list(key)
        self.columns = list(columns)
        self.q: Callable[[str], str] = lambda n: quoted(conn.dialect, n)
        self.where = f" AND ({where.replace(':', chr(92) + ':')})" if where else ""
        self._row_hash = sql_hash(sql_row([*self.key, *self.columns], self.q))
        self._key_text = sql_row(self.key, self.q)
        self._names = [self.q(c.name) for c in self.key]
        self._keys = ", ".join(self._names)

    def _range(self, lo: Bound, hi: Bound) -> tuple[str, dict[str, Any]]:
        parts, params = ["TRUE"], {}
        if lo is not None:
            parts.append(_beyond(self._names, "lo", ">"))
            params.update({f"lo{i}": v for i, v in enumerate(lo)})
        if hi is not None:
            parts.append(_beyond(self._names, "hi", "<", inclusive=True))
            params.update({f"hi{i}": v for i, v in enumerate(hi)})
        return " AND ".join(parts) + self.where, params

    def sums(self, chunks: Sequence[Chunk]) -> list[Sums]:
        """Each chunk's sums, one query each."""
        return [self._sums(c.lo, c.hi) for c in chunks]

    def _sums(self, lo: Bound, hi: Bound) -> Sums:
        cond, params = self._range(lo, hi)
        count, total = self.conn.execute(
            text(
                f"SELECT COUNT(*), SUM({self._row_hash}) FROM {self.name} WHERE {cond}"
            ),
            params,
        ).one()
        return int(count), int(total or 0) % MOD

    def sums_within(self, parent: Chunk, parts: Sequence[Chunk]) -> list[Sums]:
        """The sums of ``parts`` of ``parent``, by one query grouping its rows by
        part."""
        cond, params = self._range(parent.lo, parent.hi)
        whens = []
        for j, part in enumerate(parts[:-1]):
            whens.append(
                f"WHEN {_beyond(self._names, f'p{j}_', '<', inclusive=True)} THEN {j}"
            )
            params.update({f"p{j}_{i}": v for i, v in enumerate(part.hi or ())})
        bucket = f"CASE {' '.join(whens)} ELSE {len(parts) - 1} END"
        found = {
            int(b): (int(count), int(total or 0) % MOD)
            for b, count, total in self.conn.execute(
                text(
                    f"SELECT {bucket} AS part, COUNT(*), SUM({self._row_hash}) "
                    f"FROM {self.name} WHERE {cond} GROUP BY part"
                ),
                params,
            )
        }
        return [found.get(j, (0, 0)) for j in range(len(parts))]

    def rows(self, chunk: Chunk) -> list[Row]:
        cond, params = self._range(chunk.lo, chunk.hi)
        found = self.conn.execute(
            text(
                f"SELECT {self._key_text}, {self._row_hash}, {self._keys} "
                f"FROM {self.name} WHERE {cond}"
            ),
            params,
        )
        return [Row(r[0], int(r[1]), tuple(r[2:])) for r in found]

    def chunks(self, rows: int) -> list[Chunk]:
        """The table in chunks of ``rows`` rows, in the key's order."""
        ends: list[Key] = []
        while True:
            cond, params = self._range(ends[-1] if ends else None, None)
            end = self.conn.execute(
                text(
                    f"SELECT {self._keys} FROM {self.name} WHERE {cond} "
                    f"ORDER BY {self._keys} LIMIT 1 OFFSET {rows - 1}"
                ),
                params,
            ).first()
            if end is None:
                return _between(None, ends, None)
            ends.append(tuple(end))

    def split(self, chunk: Chunk, count: int, parts: int) -> list[Chunk]:
        """``chunk`` (of ``count`` rows) in about ``parts`` parts of its rows."""
        every = max(1, math.ceil(count / parts))
        cond, params = self._range(chunk.lo, chunk.hi)
        ends = self.conn.execute(
            text(
                f"SELECT {self._keys} FROM (SELECT {self._keys}, ROW_NUMBER() OVER "
                f"(ORDER BY {self._keys}) AS n FROM {self.name} WHERE {cond}) x "
                f"WHERE n % {every} = 0 AND n < {count} ORDER BY n"
            ),
            params,
        )
        return _between(chunk.lo, [tuple(e) for e in ends], chunk.hi)

    def texts(self, rows: Sequence[Row]) -> dict[str, list[str | None]]:
        """The canonical text of each compared column of ``rows``, by key text."""
        values = ", ".join(sql_text(c, self.q) for c in self.columns)
        return {r[0]: list(r[1:]) for r in self._select(values, rows)}

    def values(self, rows: Sequence[Row]) -> dict[str, dict[str, Any]]:
        """The key's and the compared columns' values of ``rows`` as stored, by
        key text."""
        names = [c.name for c in [*self.key, *self.columns]]
        found = self._select(", ".join(self.q(n) for n in names), rows)
        return {r[0]: dict(zip(names, r[1:], strict=True)) for r in found}

    def _select(self, what: str, rows: Sequence[Row]) -> list[Any]:
        """``what`` (with the key text first) of the rows of ``rows``' keys."""
        if not rows:
            return []
        match = " OR ".join(
            "("
            + " AND ".join(f"{n} = :k{i}_{j}" for j, n in enumerate(self._names))
            + ")"
            for i in range(len(rows))
        )
        params = {
            f"k{i}_{j}": v for i, r in enumerate(rows) for j, v in enumerate(r.key)
        }
        return list(
            self.conn.execute(
                text(f"SELECT {self._key_text}, {what} FROM {self.name} WHERE {match}"),
                params,
            )
        )

    def equal_as_collated(self, column: Canonical, a: str, b: str) -> bool:
        """Whether the server's collation of ``column`` holds ``a`` and ``b`` equal."""
        charset = (column.collation or "utf8mb4_bin").split("_")[0]
        collation = self.q(column.collation or "utf8mb4_bin")
        return bool(
            self.conn.execute(
                text(
                    f"SELECT CONVERT(:a USING {charset}) COLLATE {collation} = "
                    f"CONVERT(:b USING {charset})"
                ),
                {"a": a, "b": b},
            ).scalar()
        )


class ArrowSide:
    """A source read into Arrow, sorted by the key; hashes computed on first use."""

    def __init__(
        self, table: pa.Table, key: Sequence[Canonical], columns: Sequence[Canonical]
    ) -> None:
        order = pc.sort_indices(
            pa.table({str(i): _sortable(c, table[c.name]) for i, c in enumerate(key)}),
            [(str(i), "ascending") for i in range(len(key))],
        )
        self.table = table.take(order)
        self.key, self.columns = list(key), list(columns)
        self._keys = self.table.select([c.name for c in self.key])
        self._hash: np.ndarray | None = None
        keys = arrow_row(self.key, self.table)
        twice = pc.indices_nonzero(pc.equal(keys[1:], keys[:-1]))
        if len(twice):
            raise ConfigError(
                f"the source holds the key {self.raw_key(twice[0].as_py())} more "
                "than once: it is not a state of the target (one row per key)"
            )

    @property
    def hash(self) -> np.ndarray:
        if self._hash is None:
            self._hash = hashes(arrow_row([*self.key, *self.columns], self.table))
        return self._hash

    def raw_key(self, index: int) -> Key:
        return tuple(self._keys.column(j)[index].as_py() for j in range(len(self.key)))

    def chunks(self, rows: int) -> list[Chunk]:
        """The table in chunks of ``rows`` rows (one, empty, for an empty table)."""
        return self._cut(Chunk(None, None, 0, len(self.table)), rows)

    def split(self, chunk: Chunk, count: int, parts: int) -> list[Chunk]:
        return self._cut(chunk, max(1, math.ceil(count / parts)))

    def _cut(self, chunk: Chunk, every: int) -> list[Chunk]:
        starts = list(range(chunk.start, max(chunk.stop, chunk.start + 1), every))
        stops = [*starts[1:], chunk.stop]
        ends = [self.raw_key(s - 1) for s in starts[1:]]
        bounds = _between(chunk.lo, ends, chunk.hi)
        return [
            Chunk(b.lo, b.hi, start, stop)
            for b, start, stop in zip(bounds, starts, stops, strict=True)
        ]

    def sums(self, chunks: Sequence[Chunk]) -> list[Sums]:
        return [
            (
                c.stop - c.start,
                int(np.sum(self.hash[c.start : c.stop], dtype=np.uint64)),
            )
            for c in chunks
        ]

    def sums_within(self, parent: Chunk, parts: Sequence[Chunk]) -> list[Sums]:
        return self.sums(parts)

    def rows(self, chunk: Chunk) -> list[Row]:
        texts = arrow_row(
            self.key, self.table.slice(chunk.start, chunk.stop - chunk.start)
        )
        return [
            Row(t, int(self.hash[i]), self.raw_key(i), i)
            for t, i in zip(
                texts.to_pylist(), range(chunk.start, chunk.stop), strict=True
            )
        ]

    def texts(self, rows: Sequence[Row]) -> dict[str, list[str | None]]:
        """The canonical text of each compared column of ``rows``, by key text."""
        part = self.table.take([r.at for r in rows])
        columns = [arrow_text(c, part[c.name].combine_chunks()) for c in self.columns]
        return {
            r.key_text: [col[n].as_py() for col in columns] for n, r in enumerate(rows)
        }

    def values(self, rows: Sequence[Row]) -> dict[str, dict[str, Any]]:
        """The key's and the compared columns' values of ``rows``, by key text."""
        names = [c.name for c in [*self.key, *self.columns]]
        part = self.table.take([r.at for r in rows]).select(names).to_pylist()
        return {r.key_text: v for r, v in zip(rows, part, strict=True)}


def _between(lo: Bound, ends: list[Key], hi: Bound) -> list[Chunk]:
    """The chunks ``ends`` cut ``(lo, hi]`` into."""
    return [Chunk(a, b) for a, b in zip([lo, *ends], [*ends, hi], strict=True)]


def _sortable(c: Canonical, column: pa.ChunkedArray) -> pa.Array:
    """What the key column sorts by: text as its collation folds it, as MySQL
    orders it (near enough: a row out of its chunk is matched across chunks)."""
    if c.kind == TEXT:
        return arrow_text(c, column.combine_chunks())
    return column.combine_chunks()


def _beyond(names: list[str], prefix: str, op: str, inclusive: bool = False) -> str:
    """Row comparison of the key ``names`` with :prefix0.. spelt out, so that the
    server reads it as a range of the key's index."""
    ors = []
    for i, name in enumerate(names):
        last = i == len(names) - 1
        cmp = f"{op}=" if inclusive and last else op
        equal = [f"{names[j]} = :{prefix}{j}" for j in range(i)]
        ors.append("(" + " AND ".join([*equal, f"{name} {cmp} :{prefix}{i}"]) + ")")
    return "(" + " OR ".join(ors) + ")"
