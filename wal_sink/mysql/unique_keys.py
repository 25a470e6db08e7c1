"""The target's unique indexes besides ``mysql.key``, and which of them a stream can
reach (merge semantics).

An upsert of a new key collides with another row through such an index when the row
it inserts takes a value that row holds. It can when the stream writes every column
of the index, and also through a column it does not write whose value comes from a
non-NULL default (every new row gets the same one) or a generation expression (which
may follow written columns). It cannot through an AUTO_INCREMENT column the stream
does not write, nor one that defaults to NULL (NULLs never collide), nor a NOT NULL
column without a default (strict mode refuses every such insert). An index holding
every column of ``mysql.key`` cannot reach another row either.

With ``mysql.unique_conflicts = "refuse"`` (the default) a reachable index is refused
before anything is written; with "quarantine" the upsert's own guard (upsert.py) sets
such records aside, and ``AnotherRow`` names the row they would have reached.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Table, and_, not_, select, text
from sqlalchemy.exc import DBAPIError

from wal_sink.config import Target
from wal_sink.errors import ConfigError, first_line
from wal_sink.mysql.errors import ANOTHER_ROW, DUPLICATE_KEY, error_code
from wal_sink.mysql.target_profile import TargetProfile


@dataclass(frozen=True)
class UniqueIndex:
    name: str
    columns: tuple[str, ...]

    def describe(self) -> str:
        return f"{self.name} ({', '.join(self.columns)})"


@dataclass(frozen=True)
class Reachable:
    """A unique index a stream's new rows can collide through."""

    index: UniqueIndex
    implicit: tuple[str, ...]
    """Why columns the stream does not write still take a value, e.g. "tenant
    defaults to 1"."""


def other_unique_indexes(
    conn: Connection, table: str, key: Sequence[str]
) -> list[UniqueIndex]:
    """Unique indexes of ``table`` (its PRIMARY KEY included) that do not hold every
    column of ``key``: the ones an upsert can reach another row through."""
    rows = conn.execute(
        text(
            "SELECT INDEX_NAME, COLUMN_NAME FROM information_schema.STATISTICS "
            "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = :t AND NON_UNIQUE = 0 "
            "ORDER BY INDEX_NAME = 'PRIMARY' DESC, INDEX_NAME, SEQ_IN_INDEX"
        ),
        {"t": table},
    ).all()
    columns: dict[str, list[str]] = {}
    for name, column in rows:
        columns.setdefault(name, []).append(column)
    wanted = {k.lower() for k in key}
    return [
        UniqueIndex(name, tuple(cols))
        for name, cols in columns.items()
        if not wanted <= {c.lower() for c in cols}
    ]


def reachable_indexes(
    conn: Connection, profile: TargetProfile, key: Sequence[str], columns: Iterable[str]
) -> list[Reachable]:
    """The other unique indexes a stream writing ``columns`` can reach."""
    written = {c.lower() for c in columns}
    found = []
    for index in other_unique_indexes(conn, profile.table, key):
        implicit = []
        for column in index.columns:
            if column.lower() in written:
                continue
            facts = profile.column(column)
            if facts is not None and facts.generated:
                implicit.append(f"{column} is generated")
            elif (
                facts is None
                or facts.auto_increment
                or facts.default is None
                or facts.default.upper() == "NULL"
            ):
                break  # every new row gets a fresh value, a NULL, or is refused
            else:
                implicit.append(f"{column} defaults to {facts.default}")
        else:
            found.append(Reachable(index, tuple(implicit)))
    return found


def refuse_unique_conflicts(
    conn: Connection, mysql: Target, profile: TargetProfile, columns: Iterable[str]
) -> None:
    """Raise ConfigError when a stream writing ``columns`` can reach another row
    through a unique index besides ``mysql.key``, unless the config sets such
    records aside (``mysql.unique_conflicts = "quarantine"``)."""
    if mysql.unique_conflicts == "quarantine":
        return
    columns = list(columns)
    found = reachable_indexes(conn, profile, mysql.key, columns)
    if not found:
        return
    first = found[0]
    how = f" ({'; '.join(first.implicit)})" if first.implicit else ""
    more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
    written = [c for c in first.index.columns if c.lower() in _lower(columns)]
    raise ConfigError(
        f"unique index {first.index.describe()}{how}{more} besides {mysql.where}.key "
        f"({', '.join(mysql.key)}): a record of a new key whose "
        f"{', '.join(first.index.columns)} another row holds would update that other "
        f"row. Leave {', '.join(written or first.index.columns)} out of the stream's "
        f'columns, or set {mysql.where}.unique_conflicts = "quarantine" to set such '
        "records aside",
        table=profile.table,
    )


class AnotherRow:
    """Names the row of another key a refused upsert would have reached."""

    def __init__(self, target: Table, key: Sequence[str]) -> None:
        self.target = target
        self.key = tuple(key)
        self._indexes: list[UniqueIndex] | None = None

    def reason(
        self, conn: Connection, row: dict[str, Any], e: DBAPIError
    ) -> str | None:
        """Why MySQL refused ``row``'s upsert, when it would have reached another
        key's row (the upsert's guard, or a duplicate on update): the index and
        that row's key. None for any other error. Read inside the batch's
        transaction, right where the row failed."""
        code = error_code(e)
        if code not in (ANOTHER_ROW, DUPLICATE_KEY):
            return None
        if self._indexes is None:
            self._indexes = other_unique_indexes(conn, self.target.name, self.key)
        found = self._holder(conn, row)
        if found is None:
            return (
                "it would update the row of another key through a unique index "
                "besides mysql.key (one of "
                f"{'; '.join(i.describe() for i in self._indexes)}); "
                f"MySQL error {code}: {first_line(e.orig)}"
            )
        index, other = found
        key = ", ".join(f"{k}={v!r}" for k, v in zip(self.key, other))
        return (
            f"unique index {index.describe()} already holds its value for the row "
            f"with {key}: it would update that row"
        )

    def _holder(
        self, conn: Connection, row: dict[str, Any]
    ) -> tuple[UniqueIndex, tuple[Any, ...]] | None:
        """The first index whose columns ``row`` carries (none NULL) through which
        another key's row holds its values, and that row's key."""
        t = self.target
        for index in self._indexes or ():
            if any(row.get(c) is None for c in index.columns):
                continue
            found = conn.execute(
                select(*[t.c[k] for k in self.key])
                .where(and_(*[t.c[c] == row[c] for c in index.columns]))
                .where(not_(and_(*[t.c[k] == row[k] for k in self.key])))
                .limit(1)
            ).first()
            if found is not None:
                return index, tuple(found)
        return None


def _lower(columns: Iterable[str]) -> set[str]:
    return {c.lower() for c in columns}
