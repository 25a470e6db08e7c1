"""Tombstones: with ``[cdc]`` and ``mysql.version_column``, a delete leaves (key,
version, when) behind so that an older upsert of the key arriving later — a forced
replay, files Spark picks in another order, a re-partitioned topic, another sink's
backfill — never brings the row back. The final state is then the one the versions
say, whatever the delivery order.

They live in a table beside the target (``mysql.tombstone_table``, default
``<table>_tombstones``), not in a soft-delete column of the target: the target keeps
meaning what its users think (a deleted row is gone, and its unique values are free
for other rows), nothing else that reads or writes the target needs to know, and
tombstones can expire without touching it. The table is made with ``CREATE TABLE …
SELECT`` from the target, so its key and version columns have the target's own types
and collations, and kept so at every start (a key widened or recollated later is
widened or recollated there too): a tombstone matches a key exactly as the target's
key does. That DDL runs before any batch's transaction (``ensure``); a batch only
reflects the table (``reflect``).

Tombstones belong to the target, not to one sink: the table's primary key is the
target's key, its comment names the target (``wal_sink tombstones of <table>``), and
every sink with ``[cdc]`` and a version column writing that target reads and writes
the same one (a sink configured with another is refused, naming it), and it is no
other target's (refused at start, its comment never rewritten to another). A sink that
cannot honour them (no ``[cdc]`` or no version column) is refused on a target that
has one (tombstone_checks.py). ``_wal_sink_id`` names the sink that recorded a key's
newest delete; each sink's purge expires the tombstones it recorded, after its own
``cdc.tombstone_retention``. Tables of 0.4 (primary key (sink id, key)) are migrated
at start under a named lock: a key's newest tombstone stays.

Tie rule: a delete at version v removes a stored row of version <= v, and an upsert
at version <= a tombstone's is stale: at the same version the delete wins. An upsert
without a version is older than any version.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from functools import partial
from typing import Any

from sqlalchemy import (
    Connection,
    Engine,
    MetaData,
    Table,
    column,
    delete,
    func,
    not_,
    select,
    table,
    text,
    tuple_,
)
from sqlalchemy import inspect as inspect_db
from sqlalchemy.dialects.mysql import insert
from sqlalchemy.exc import DBAPIError, NoSuchTableError

from wal_sink.config import Config, Target
from wal_sink.config.spelling import Spelling
from wal_sink.errors import ConfigError, TerminalError, first_line
from wal_sink.mysql.errors import error_code
from wal_sink.mysql.history import ensure_events, events_table
from wal_sink.mysql.identifiers import quoted
from wal_sink.mysql.named_lock import named_lock
from wal_sink.mysql.tables import ACCESS_DENIED, table_comment
from wal_sink.mysql.truncates import Truncates

SINK = "_wal_sink_id"
VERSION = "_wal_version"
DELETED_AT = "_wal_deleted_at"
EXPIRY_INDEX = "wal_sink_expiry"
COMMENT = "wal_sink tombstones of {}"
KEEP_KEYS = 10_000
"""Keys an expiry spares at most (open quarantined upserts): more, nothing expires."""


def tombstone_ddl(
    quote: Callable[[str], str],
    name: str,
    target: str,
    key: Sequence[str],
    version: str,
) -> str:
    """``CREATE TABLE IF NOT EXISTS`` of the tombstone table of ``target``; the key
    and version columns are copied from it by ``CREATE TABLE … SELECT``."""
    keys = ", ".join(quote(k) for k in key)
    return (
        f"CREATE TABLE IF NOT EXISTS {quote(name)} ("
        f"{SINK} VARCHAR(128) NOT NULL, {DELETED_AT} DATETIME(6) NOT NULL, "
        f"PRIMARY KEY ({keys}), KEY {EXPIRY_INDEX} ({SINK}, {DELETED_AT})"
        f") ENGINE=InnoDB COMMENT='{COMMENT.format(target)}' "
        f"SELECT '' AS {SINK}, {keys}, {quote(version)} AS {VERSION}, "
        f"NOW(6) AS {DELETED_AT} FROM {quote(target)} WHERE FALSE"
    )


def guarding_tables(conn: Connection, target: str) -> list[str]:
    """The tables holding ``target``'s tombstones: named by their comment, or by
    the default name (a table of 0.4 not migrated yet)."""
    return list(
        conn.execute(
            text(
                "SELECT t.TABLE_NAME FROM information_schema.TABLES t "
                "WHERE t.TABLE_SCHEMA = DATABASE() AND (t.TABLE_COMMENT = :c OR "
                "(t.TABLE_NAME = :n AND EXISTS (SELECT 1 FROM "
                "information_schema.COLUMNS c WHERE c.TABLE_SCHEMA = DATABASE() "
                f"AND c.TABLE_NAME = t.TABLE_NAME AND c.COLUMN_NAME = '{VERSION}'))) "
                "ORDER BY t.TABLE_NAME"
            ),
            {"c": COMMENT.format(target), "n": f"{target}_tombstones"},
        ).scalars()
    )


def ensure_side_tables(
    engine: Engine, config: Config, targets: Sequence[Target]
) -> list[tuple[str, str]]:
    """The tables beside each of ``targets`` made or brought up to date: the
    tombstone table of one that keeps tombstones ([cdc] and a version column), its
    truncate table with ``cdc.truncate_values``, the events table of a history
    (type 2). DDL, run at start and beside the targets' own (target_ddl.py),
    before any batch's transaction. Returns each table's kind and name."""
    made = []
    for target in targets:
        if target.scd_type == 2:
            ensure_events(engine, target)
            made.append(("events", events_table(target)))
        elif config.keeps_tombstones(target):
            Tombstones(config, target).ensure(engine)
            made.append(("tombstone", target.tombstones))
            if config.cdc.truncate_values:
                Truncates(config, target).ensure(engine)
                made.append(("truncate", target.truncates))
    return made


class Tombstones:
    """The tombstones of one target, as one sink reads and records them."""

    def __init__(self, config: Config, mysql: Target) -> None:
        if not config.cdc or not mysql.version_column:
            raise ValueError("tombstones need [cdc] and mysql.version_column")
        self.sink_id = config.sink.id
        self.name = mysql.tombstones
        self.target = mysql.table
        self.where = mysql.where
        self.key = mysql.key
        self.version = mysql.version_column
        self._table: Table | None = None
        self._named = table(
            self.name, column(SINK), column(DELETED_AT), *[column(k) for k in self.key]
        )
        """Enough of the table to count and expire, without reflecting it."""

    def ensure(self, engine: Engine) -> None:
        """Create the table if it does not exist, or bring one of an earlier
        version or with stale column types up to date (idempotent, under a named
        lock against a sink starting at the same time), after checking that it is
        this target's only tombstone table and no other target's. DDL: run at
        start, before any batch's transaction, never inside one (``reflect``)."""
        with (
            engine.connect() as conn,
            named_lock(
                conn, f"wal_sink:{self.target}", f"the tombstone table {self.name}"
            ),
        ):
            self._refuse_another(conn)
            try:
                if not inspect_db(conn).has_table(self.name):
                    conn.execute(text(self._ddl(conn)))
                else:
                    self._upgrade(conn, self._check_is_one(conn))
            except DBAPIError as e:
                if error_code(e) not in ACCESS_DENIED:
                    raise
                raise ConfigError(
                    f"the tombstone table {self.name} is missing or out of date and "
                    f"this user may not change it ({first_line(e.orig)}): create or "
                    "upgrade it as in sql/wal_sink_tables.sql"
                ) from None

    def reflect(self, conn: Connection) -> Table:
        """The table as it is (once), read on ``conn``, a batch's: no DDL, which
        would commit the batch's transaction or wait on the locks it holds. Its
        key columns are known by this sink's spelling of them, whoever made it.

        Raises:
            TerminalError: the table is gone since the start made it.
        """
        if self._table is None:
            spelling = Spelling(self.key)
            try:
                self._table = Table(
                    self.name,
                    MetaData(),
                    autoload_with=conn,
                    listeners=[("column_reflect", _keyed_as(spelling))],
                )
            except NoSuchTableError:
                raise TerminalError(
                    f"the tombstone table {self.name} is gone; the next start "
                    "makes it again",
                    table=self.target,
                ) from None
        return self._table

    def _check_is_one(self, conn: Connection) -> str:
        """Refuse a table of that name that is not a tombstone table of the
        target, or that holds another target's (it is never changed); returns
        its comment."""
        columns = Spelling(c["name"] for c in inspect_db(conn).get_columns(self.name))
        wanted = (SINK, *self.key, VERSION, DELETED_AT)
        missing = [c for c in wanted if c not in columns]
        if missing:
            raise ConfigError(
                f"table {self.name} is not the tombstone table of {self.target} "
                f"(no column {', '.join(missing)}); set {self.where}.tombstone_table "
                "to another name"
            )
        comment = table_comment(conn, self.name)
        owner = comment.removeprefix(COMMENT.format(""))
        if owner != comment and owner != self.target:
            raise ConfigError(
                f"table {self.name} holds the tombstones of table {owner}, and one "
                f"tombstone table serves one target: set {self.where}.tombstone_table "
                f"to another name for table {self.target}"
            )
        return comment

    def _ddl(self, conn: Connection) -> str:
        quote = partial(quoted, conn.dialect)
        return tombstone_ddl(quote, self.name, self.target, self.key, self.version)

    def _refuse_another(self, conn: Connection) -> None:
        others = [t for t in guarding_tables(conn, self.target) if t != self.name]
        if others:
            raise ConfigError(
                f"table {self.target}'s tombstones are in table {others[0]}, not "
                f"{self.name}: tombstones belong to the target, and every sink "
                f"writing it must honour the same ones. Set mysql.tombstone_table = "
                f'"{others[0]}"'
            )

    def _upgrade(self, conn: Connection, current: str) -> None:
        """A table of 0.4 (keyed by sink and key) keyed by the target's key, a key's
        newest tombstone kept; the comment naming the target (``current``: the one
        it has); the key and version columns of the target's types now."""
        quote = partial(quoted, conn.dialect)
        name = quote(self.name)
        pk = inspect_db(conn).get_pk_constraint(self.name)["constrained_columns"]
        if SINK in pk:
            on = " AND ".join(f"a.{quote(k)} = b.{quote(k)}" for k in self.key)
            conn.execute(
                text(
                    f"DELETE a FROM {name} a JOIN {name} b ON {on} AND "
                    f"(a.{VERSION} < b.{VERSION} OR (a.{VERSION} = b.{VERSION} "
                    f"AND a.{SINK} > b.{SINK}))"
                )
            )
            keys = ", ".join(quote(k) for k in self.key)
            conn.execute(
                text(f"ALTER TABLE {name} DROP PRIMARY KEY, ADD PRIMARY KEY ({keys})")
            )
        changes = [
            f"MODIFY COLUMN {quote(mine)} {definition}"
            for mine, definition in self._stale_columns(conn)
        ]
        comment = COMMENT.format(self.target)
        if current != comment:
            changes.append(f"COMMENT = '{comment}'")
        if changes:
            try:
                conn.execute(text(f"ALTER TABLE {name} {', '.join(changes)}"))
            except DBAPIError as e:
                if error_code(e) in ACCESS_DENIED:
                    raise
                raise ConfigError(
                    f"the tombstone table {self.name} cannot take the key and version "
                    f"columns of {self.target} as they are now "
                    f"({first_line(e.orig)}); empty it once no older upsert can "
                    "arrive, or recreate it"
                ) from None

    def _stale_columns(self, conn: Connection) -> Iterator[tuple[str, str]]:
        """(tombstone column, the target column's definition) where they differ."""
        types = {
            (t, c.lower()): (ctype, charset, collation)
            for t, c, ctype, charset, collation in conn.execute(
                text(
                    "SELECT TABLE_NAME, COLUMN_NAME, COLUMN_TYPE, CHARACTER_SET_NAME, "
                    "COLLATION_NAME FROM information_schema.COLUMNS "
                    "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME IN (:a, :b)"
                ),
                {"a": self.target, "b": self.name},
            )
        }
        pairs = [(k, k, "NOT NULL") for k in self.key]
        pairs.append((VERSION, self.version, "NULL"))
        for mine, theirs, null in pairs:
            wanted = types.get((self.target, theirs.lower()))
            if wanted is None or types.get((self.name, mine.lower())) == wanted:
                continue
            ctype, charset, collation = wanted
            text_type = (
                f" CHARACTER SET {charset} COLLATE {collation}" if charset else ""
            )
            yield mine, f"{ctype}{text_type} {null}"

    @property
    def table(self) -> Table:
        if self._table is None:
            raise RuntimeError("Tombstones.reflect() first")
        return self._table

    def record(self, conn: Connection, rows: Sequence[dict[str, Any]]) -> None:
        """Leave a tombstone for each delete of ``rows`` that MySQL applied (each
        with its key and a non-NULL version), inside the batch's transaction; a
        key's tombstone keeps its highest version and the sink that recorded it."""
        if not rows:
            return
        t = self.table
        stmt = insert(t).values({DELETED_AT: func.now(6)})
        new = stmt.inserted
        newer = new[VERSION] >= t.c[VERSION]
        conn.execute(
            stmt.on_duplicate_key_update(
                [  # left to right: the version last, as MySQL sees earlier results
                    (SINK, func.if_(newer, new[SINK], t.c[SINK])),
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
        """The tombstones this sink recorded last (0 while the table does not
        exist)."""
        if not inspect_db(conn).has_table(self.name):
            return 0
        t = self._named
        return conn.execute(
            select(func.count()).where(t.c[SINK] == self.sink_id)
        ).scalar_one()

    def expire(
        self,
        conn: Connection,
        older_than: float,
        dry_run: bool,
        keep: Sequence[tuple[Any, ...]] = (),
    ) -> int:
        """Remove (or with ``dry_run`` count) the tombstones this sink recorded more
        than ``older_than`` seconds ago, except those of the keys in ``keep`` (keys
        of open quarantined upserts, which a retry would otherwise bring back);
        returns how many. More than KEEP_KEYS keys to keep: none is removed."""
        if not inspect_db(conn).has_table(self.name) or len(keep) > KEEP_KEYS:
            return 0
        t = self._named
        micros = int(older_than * 1_000_000)
        cutoff = func.date_sub(func.now(6), text(f"INTERVAL {micros} MICROSECOND"))
        mine = (t.c[SINK] == self.sink_id) & (t.c[DELETED_AT] < cutoff)
        if keep:
            mine &= not_(tuple_(*[t.c[k] for k in self.key]).in_(list(keep)))
        if dry_run:
            return conn.execute(select(func.count()).where(mine)).scalar_one()
        return conn.execute(delete(t).where(mine)).rowcount


def _keyed_as(spelling: Spelling) -> Callable[[Any, Table, dict[str, Any]], None]:
    """A reflection listener keying each column by ``spelling``'s name for it."""

    def key(inspector: Any, table: Table, column: dict[str, Any]) -> None:
        column["key"] = spelling.of(column["name"])

    return key
