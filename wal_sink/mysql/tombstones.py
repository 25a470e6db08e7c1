"""Tombstones: with ``[cdc]`` and ``mysql.version_column``, a delete leaves (key,
version, when) behind so that an older upsert of the key arriving later — a forced
replay, files Spark picks in another order, a re-partitioned topic — never brings
the row back. The final state is then the one the versions say, whatever the
delivery order.

They live in a table of the sink's beside the target (``mysql.tombstone_table``,
default ``<table>_tombstones``), not in a soft-delete column of the target: the
target keeps meaning what its users think (a deleted row is gone, and its unique
values are free for other rows), nothing else that reads or writes the target needs
to know, and tombstones can expire without touching it. The table is made with
``CREATE TABLE … SELECT`` from the target, so its key and version columns have the
target's own types and collations: a tombstone matches a key exactly as the target's
key does. Its primary key is (sink id, key).

Tie rule: a delete at version v removes a stored row of version <= v, and an upsert
at version <= a tombstone's is stale: at the same version the delete wins. An upsert
without a version is older than any version.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import (
    Connection,
    Engine,
    MetaData,
    Table,
    column,
    delete,
    func,
    select,
    table,
    text,
)
from sqlalchemy import inspect as inspect_db
from sqlalchemy.dialects.mysql import insert
from sqlalchemy.exc import DBAPIError

from wal_sink.config import Config
from wal_sink.errors import ConfigError, first_line
from wal_sink.mysql.errors import error_code
from wal_sink.mysql.tables import ACCESS_DENIED

SINK = "_wal_sink_id"
VERSION = "_wal_version"
DELETED_AT = "_wal_deleted_at"
EXPIRY_INDEX = "wal_sink_expiry"


def tombstone_ddl(
    quote: Any, name: str, target: str, key: Sequence[str], version: str
) -> str:
    """``CREATE TABLE IF NOT EXISTS`` of the tombstone table of ``target``; the key
    and version columns are copied from it by ``CREATE TABLE … SELECT``."""
    keys = ", ".join(quote(k) for k in key)
    return (
        f"CREATE TABLE IF NOT EXISTS {quote(name)} ("
        f"{SINK} VARCHAR(128) NOT NULL, {DELETED_AT} DATETIME(6) NOT NULL, "
        f"PRIMARY KEY ({SINK}, {keys}), KEY {EXPIRY_INDEX} ({SINK}, {DELETED_AT})"
        f") ENGINE=InnoDB SELECT '' AS {SINK}, {keys}, {quote(version)} AS {VERSION}, "
        f"NOW(6) AS {DELETED_AT} FROM {quote(target)} WHERE FALSE"
    )


class Tombstones:
    """The tombstones of one sink, in the tombstone table of its target."""

    def __init__(self, config: Config) -> None:
        mysql = config.mysql
        if not config.cdc or not mysql.version_column:
            raise ValueError("tombstones need [cdc] and mysql.version_column")
        self.sink_id = config.sink.id
        self.name = mysql.tombstones
        self.target = mysql.table
        self.key = mysql.key
        self.version = mysql.version_column
        self._table: Table | None = None
        self._named = table(self.name, column(SINK), column(DELETED_AT))
        """Enough of the table to count and expire, without reflecting it."""

    def ensure(self, engine: Engine) -> Table:
        """Create the table if it does not exist (idempotent), check that it is
        this target's, and return it."""
        if self._table is not None:
            return self._table
        with engine.connect() as conn:
            exists = inspect_db(conn).has_table(self.name)
        if not exists:
            ddl = tombstone_ddl(
                engine.dialect.identifier_preparer.quote,
                self.name,
                self.target,
                self.key,
                self.version,
            )
            try:
                with engine.begin() as conn:
                    conn.execute(text(ddl))
            except DBAPIError as e:
                if error_code(e) not in ACCESS_DENIED:
                    raise
                raise ConfigError(
                    f"the tombstone table {self.name} does not exist and this user "
                    f"may not create it ({first_line(e.orig)}): create it as in "
                    "sql/wal_sink_tables.sql"
                ) from None
        with engine.connect() as conn:
            table = Table(self.name, MetaData(), autoload_with=conn)
        missing = [
            c for c in (SINK, *self.key, VERSION, DELETED_AT) if c not in table.c
        ]
        if missing:
            raise ConfigError(
                f"table {self.name} is not the tombstone table of {self.target} "
                f"(no column {', '.join(missing)}); set mysql.tombstone_table to "
                "another name"
            )
        self._table = table
        return table

    @property
    def table(self) -> Table:
        if self._table is None:
            raise RuntimeError("Tombstones.ensure() first")
        return self._table

    def record(self, conn: Connection, rows: Sequence[dict[str, Any]]) -> None:
        """Leave a tombstone for each delete of ``rows`` (each with its key and a
        non-NULL version), inside the batch's transaction; a key's tombstone keeps
        its highest version."""
        if not rows:
            return
        t = self.table
        stmt = insert(t).values({DELETED_AT: func.now(6)})
        new = stmt.inserted
        newer = new[VERSION] >= t.c[VERSION]
        conn.execute(
            stmt.on_duplicate_key_update(
                [  # left to right: the version last, as MySQL sees earlier results
                    (DELETED_AT, func.if_(newer, new[DELETED_AT], t.c[DELETED_AT])),
                    (VERSION, func.if_(newer, new[VERSION], t.c[VERSION])),
                ]
            ),
            [
                {
                    SINK: self.sink_id,
                    **{k: r[k] for k in self.key},
                    VERSION: r[self.version],
                }
                for r in rows
            ],
        )

    def count(self, conn: Connection) -> int:
        """This sink's tombstones (0 while the table does not exist)."""
        if not inspect_db(conn).has_table(self.name):
            return 0
        t = self._named
        return conn.execute(
            select(func.count()).where(t.c[SINK] == self.sink_id)
        ).scalar_one()

    def expire(self, conn: Connection, older_than: float, dry_run: bool) -> int:
        """Remove (or with ``dry_run`` count) this sink's tombstones written more
        than ``older_than`` seconds ago; returns how many."""
        if not inspect_db(conn).has_table(self.name):
            return 0
        t = self._named
        micros = int(older_than * 1_000_000)
        cutoff = func.date_sub(func.now(6), text(f"INTERVAL {micros} MICROSECOND"))
        mine = (t.c[SINK] == self.sink_id) & (t.c[DELETED_AT] < cutoff)
        if dry_run:
            return conn.execute(select(func.count()).where(mine)).scalar_one()
        return conn.execute(delete(t).where(mine)).rowcount
