"""The target table, reflected from the server: refused when missing, hidden from the
sink's user, or not InnoDB, since only a transactional table lets a batch and its ack
row commit together."""

from __future__ import annotations

from functools import partial
from typing import Any, NoReturn

from sqlalchemy import Connection, Engine, MetaData, Table, text
from sqlalchemy.exc import DBAPIError, NoSuchTableError

from wal_sink.errors import ConfigError, TransientError
from wal_sink.mysql.errors import error_code
from wal_sink.mysql.identifiers import quoted
from wal_sink.mysql.target_profile import COLUMN_FACTS, read_columns

# What the sink does to target rows (upserts, CDC deletes).
TARGET_PRIVILEGES = "SELECT, INSERT, UPDATE, DELETE"
NO_SUCH_TABLE = 1146
# table or column access denied: the server answers so whether or not the table exists
ACCESS_DENIED = frozenset({1142, 1143})


def reflect_target(engine: Engine, name: str) -> Table:
    """Reflect the target table, refusing a missing, invisible or non-transactional
    one; each column's ``info`` holds its facts (target_profile.facts_of)."""
    with engine.connect() as conn:
        engine_name = conn.execute(
            text(
                "SELECT ENGINE FROM information_schema.TABLES "
                "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = :t"
            ),
            {"t": name},
        ).scalar_one_or_none()
        if engine_name is None:
            _refuse_unseen(conn, name)
        if engine_name.upper() != "INNODB":
            raise ConfigError(
                f"target table uses {engine_name}; it must be InnoDB (transactional) "
                "for batches to be applied atomically",
                table=name,
            )
        try:
            table = Table(
                name,
                MetaData(),
                autoload_with=conn,
                listeners=[("column_reflect", _unescaped_name)],
            )
        except NoSuchTableError:
            raise ConfigError("target table does not exist", table=name) from None
        facts = read_columns(conn, name)
        for column in table.columns:
            column.info[COLUMN_FACTS] = facts.get(column.name.lower())
        return table


def _refuse_unseen(conn: Connection, name: str) -> NoReturn:
    """information_schema shows a user only the tables it holds a privilege on; a
    SELECT tells a missing table (1146) from one this user may not read, whose
    existence the server does not reveal to it."""
    quote = partial(quoted, conn.dialect)
    try:
        conn.execute(text(f"SELECT 1 FROM {quote(name)} LIMIT 0"))
    except DBAPIError as e:
        if error_code(e) == NO_SUCH_TABLE:
            raise ConfigError(
                "target table does not exist; create it first, or set "
                "mysql.auto_create = true",
                table=name,
            ) from None
        if error_code(e) not in ACCESS_DENIED:
            raise
        user, database = conn.execute(text("SELECT CURRENT_USER(), DATABASE()")).one()
        account = "'{}'@'{}'".format(*user.rsplit("@", 1))
        raise ConfigError(
            f"target table cannot be seen by user {account}: it holds no privilege "
            f"on it (or the table does not exist); the sink needs GRANT "
            f"{TARGET_PRIVILEGES} ON {quote(database)}.{quote(name)} TO {account}",
            table=name,
        ) from None
    raise TransientError("target table appeared while it was checked", table=name)


def _unescaped_name(inspector: Any, table: Table, column: dict[str, Any]) -> None:
    """SQLAlchemy reads MySQL's column names from SHOW CREATE TABLE without undoing
    the doubled backtick of a name that holds one (2.1.9)."""
    column["name"] = column["name"].replace("``", "`")
