"""The two sides ``wal-sink verify --against`` compares, each answering the same
three questions about a chunk of keys — its count and checksum, each row's key and
hash, each row's values as text — where its data is:

- a MySQL table (the target, or a source on the sink's server): one query per
  question and chunk, the canonical text and its hash computed by the server
  (verify_canonical.py); a chunk is a range of the key, read through its index;
- an Arrow table (a Delta or Parquet source, read whole, only the columns
  compared): sorted by the key once, the texts and hashes computed by pyarrow's
  kernels, a chunk a slice of it.

A chunk is ``(lo, hi]`` in the key's order, ``None`` for no bound.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sqlalchemy import Connection, text

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


@dataclass(frozen=True)
class Row:
    """One row of a chunk: its key as text (matches across sides), hash, raw key."""

    key_text: str
    hash: int
    key: Key


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

    def _range(self, lo: Bound, hi: Bound) -> tuple[str, dict[str, Any]]:
        names = [self.q(c.name) for c in self.key]
        parts, params = ["TRUE"], {}
        if lo is not None:
            parts.append(_beyond(names, "lo", ">"))
            params.update({f"lo{i}": v for i, v in enumerate(lo)})
        if hi is not None:
            parts.append(_beyond(names, "hi", "<", inclusive=True))
            params.update({f"hi{i}": v for i, v in enumerate(hi)})
        return " AND ".join(parts) + self.where, params

    def sums(self, lo: Bound, hi: Bound) -> tuple[int, int]:
        """The chunk's row count and the sum of its rows' hashes modulo 2**64."""
        cond, params = self._range(lo, hi)
        count, total = self.conn.execute(
            text(
                f"SELECT COUNT(*), SUM({self._row_hash}) FROM {self.name} WHERE {cond}"
            ),
            params,
        ).one()
        return int(count), int(total or 0) % MOD

    def rows(self, lo: Bound, hi: Bound) -> list[Row]:
        cond, params = self._range(lo, hi)
        keys = ", ".join(self.q(c.name) for c in self.key)
        found = self.conn.execute(
            text(
                f"SELECT {self._key_text}, {self._row_hash}, {keys} "
                f"FROM {self.name} WHERE {cond}"
            ),
            params,
        )
        return [Row(r[0], int(r[1]), tuple(r[2:])) for r in found]

    def boundaries(self, chunk_rows: int) -> list[Key]:
        """The key ending each chunk of ``chunk_rows`` rows, in the key's order."""
        keys = ", ".join(self.q(c.name) for c in self.key)
        ends: list[Key] = []
        while True:
            cond, params = self._range(ends[-1] if ends else None, None)
            end = self.conn.execute(
                text(
                    f"SELECT {keys} FROM {self.name} WHERE {cond} ORDER BY {keys} "
                    f"LIMIT 1 OFFSET {chunk_rows - 1}"
                ),
                params,
            ).first()
            if end is None:
                return ends
            ends.append(tuple(end))

    def texts(self, keys: Sequence[Key]) -> dict[str, list[str | None]]:
        """The canonical text of each compared column of the rows of ``keys``, by
        key text."""
        if not keys:
            return {}
        names = [self.q(c.name) for c in self.key]
        match = " OR ".join(
            "(" + " AND ".join(f"{n} = :k{i}_{j}" for j, n in enumerate(names)) + ")"
            for i in range(len(keys))
        )
        params = {f"k{i}_{j}": v for i, k in enumerate(keys) for j, v in enumerate(k)}
        values = ", ".join(sql_text(c, self.q) for c in self.columns)
        found = self.conn.execute(
            text(f"SELECT {self._key_text}, {values} FROM {self.name} WHERE {match}"),
            params,
        )
        return {r[0]: list(r[1:]) for r in found}

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
    """A source read into Arrow, sorted by the key, cut into chunks of its rows."""

    def __init__(
        self,
        table: pa.Table,
        key: Sequence[Canonical],
        columns: Sequence[Canonical],
        chunk_rows: int,
    ) -> None:
        order = pc.sort_indices(
            pa.table({str(i): _sortable(c, table[c.name]) for i, c in enumerate(key)}),
            [(str(i), "ascending") for i in range(len(key))],
        )
        self.table = table.take(order)
        self.key, self.columns = list(key), list(columns)
        self.key_text = arrow_row(self.key, self.table).to_pylist()
        self.hash = hashes(arrow_row([*self.key, *self.columns], self.table))
        self.starts = list(range(0, max(len(self.table), 1), chunk_rows))
        ends = [s - 1 for s in self.starts[1:]]
        self._keys = self.table.select([c.name for c in self.key])
        self.ends: list[Key] = [self.raw_key(i) for i in ends]

    def raw_key(self, index: int) -> Key:
        return tuple(self._keys.column(j)[index].as_py() for j in range(len(self.key)))

    def _slice(self, chunk: int) -> slice:
        start = self.starts[chunk]
        end = self.starts[chunk + 1] if chunk + 1 < len(self.starts) else None
        return slice(start, end if end is not None else len(self.table))

    def sums(self, chunk: int) -> tuple[int, int]:
        part = self.hash[self._slice(chunk)]
        return len(part), int(np.sum(part, dtype=np.uint64))

    def rows(self, chunk: int) -> list[Row]:
        s = self._slice(chunk)
        return [
            Row(self.key_text[i], int(self.hash[i]), self.raw_key(i))
            for i in range(s.start, s.stop)
        ]

    def texts(self, keys: Sequence[str]) -> dict[str, list[str | None]]:
        """The canonical text of each compared column of the rows of ``keys`` (key
        texts)."""
        wanted = set(keys)
        at = [i for i, k in enumerate(self.key_text) if k in wanted]
        part = self.table.take(at)
        columns = [arrow_text(c, part[c.name].combine_chunks()) for c in self.columns]
        return {
            self.key_text[i]: [col[n].as_py() for col in columns]
            for n, i in enumerate(at)
        }


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
