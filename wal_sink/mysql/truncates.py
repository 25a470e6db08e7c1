"""Truncates: with ``cdc.truncate_values`` a record at version s removes every row
of its table whose version is at or below s, or NULL (no version is newer than the
truncate), and leaves one tombstone for the whole table, so that an upsert at or
below s arriving later — a forced replay, files Spark picks in another order —
stays out (tombstone_probe.py reads it beside the keys' tombstones). The rows go
by a DELETE inside the batch's transaction, never by TRUNCATE, which would commit
it; a foreign key or trigger refusing the DELETE refuses the whole truncate.

The table-wide tombstone lives beside the tombstone table, in
``<tombstone_table>_truncate``: one row per target, made with ``CREATE TABLE …
SELECT`` from the target so that its version column has the target's type and
compares as the target's versions do. Like the keys' tombstones it belongs to the
target (every sink writing it reads and writes the same row; ``_wal_sink_id``
names the sink that recorded the newest truncate); it is made at start, never in
a batch, and never expires: it is one row.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from sqlalchemy import Connection, Engine, text
from sqlalchemy import inspect as inspect_db
from sqlalchemy.exc import DBAPIError

from wal_sink.config import Config, Target
from wal_sink.config.spelling import Spelling
from wal_sink.errors import ConfigError, first_line
from wal_sink.mysql.errors import error_code
from wal_sink.mysql.identifiers import quoted
from wal_sink.mysql.tables import ACCESS_DENIED, table_comment

# the truncate table's columns (its version and sink named as the tombstone table's)
TABLE = "_wal_table"
VERSION = "_wal_version"
SINK = "_wal_sink_id"
TRUNCATED_AT = "_wal_truncated_at"
COMMENT = "wal_sink truncates of {}"


class Truncates:
    """The truncate tombstone of one target, as one sink applies truncates to it."""

    def __init__(self, config: Config, target: Target) -> None:
        if not config.cdc or not target.version_column:
            raise ValueError("truncates need [cdc] and mysql.version_column")
        self.sink_id = config.sink.id
        self.name = target.truncates
        self.target = target.table
        self.where = target.where
        self.version = target.version_column

    def ensure(self, engine: Engine) -> None:
        """Create the table if it does not exist, or refuse one of that name that
        is not this target's (ConfigError). DDL: run at start, beside the
        tombstone table's."""
        with engine.connect() as conn:
            try:
                if not inspect_db(conn).has_table(self.name):
                    conn.execute(text(self._ddl(conn)))
                    conn.commit()
                    return
            except DBAPIError as e:
                if error_code(e) not in ACCESS_DENIED:
                    raise
                raise ConfigError(
                    f"the truncate table {self.name} is missing and this user may "
                    f"not create it ({first_line(e.orig)}): create it as in "
                    "sql/wal_sink_tables.sql"
                ) from None
            self._check_is_ours(conn)

    def _ddl(self, conn: Connection) -> str:
        quote = partial(quoted, conn.dialect)
        return (
            f"CREATE TABLE IF NOT EXISTS {quote(self.name)} ("
            f"{TABLE} VARCHAR(64) NOT NULL, {SINK} VARCHAR(128) NOT NULL, "
            f"{TRUNCATED_AT} DATETIME(6) NOT NULL, PRIMARY KEY ({TABLE})"
            f") ENGINE=InnoDB COMMENT='{COMMENT.format(self.target)}' "
            f"SELECT '' AS {TABLE}, '' AS {SINK}, {quote(self.version)} AS "
            f"{VERSION}, NOW(6) AS {TRUNCATED_AT} FROM {quote(self.target)} "
            "WHERE FALSE"
        )

    def _check_is_ours(self, conn: Connection) -> None:
        columns = Spelling(c["name"] for c in inspect_db(conn).get_columns(self.name))
        comment = table_comment(conn, self.name)
        missing = [c for c in (TABLE, SINK, VERSION, TRUNCATED_AT) if c not in columns]
        if missing or comment != COMMENT.format(self.target):
            raise ConfigError(
                f"table {self.name} is not the truncate table of {self.target}; set "
                f"{self.where}.tombstone_table to another name (the truncate table "
                "is named after it)"
            )

    def apply(self, conn: Connection, version: Any) -> None:
        """Remove the rows at or below ``version`` (or NULL), then record it as the
        table's tombstone if it is the newest; in the caller's transaction. A
        DBAPIError (a child row refusing the DELETE) leaves the caller to roll
        back to its savepoint."""
        quote = partial(quoted, conn.dialect)
        column = quote(self.version)
        conn.execute(
            text(
                f"DELETE FROM {quote(self.target)} WHERE {column} IS NULL OR "
                f"{column} <= :v"
            ),
            {"v": version},
        )
        newer = f"VALUES({VERSION}) >= {VERSION}"
        conn.execute(
            text(
                f"INSERT INTO {quote(self.name)} ({TABLE}, {SINK}, {VERSION}, "
                f"{TRUNCATED_AT}) VALUES (:t, :s, :v, NOW(6)) ON DUPLICATE KEY "
                f"UPDATE {SINK} = IF({newer}, VALUES({SINK}), {SINK}), "
                f"{TRUNCATED_AT} = IF({newer}, VALUES({TRUNCATED_AT}), "
                f"{TRUNCATED_AT}), {VERSION} = IF({newer}, VALUES({VERSION}), "
                f"{VERSION})"
            ),
            {"t": self.target, "s": self.sink_id, "v": version},
        )
