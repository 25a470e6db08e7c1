"""Tables the sink creates and evolves (``mysql.auto_create``, ``mysql.auto_evolve``):
the DDL a stream's schema asks of the target, planned from what the server has and
run before any batch's transaction (MySQL commits DDL implicitly), never inside it.

- A missing target is created from the stream's columns (column_types.py): the key
  as PRIMARY KEY, InnoDB, utf8mb4.
- A stream column the target lacks is added, NULL-able. An existing column is never
  dropped, narrowed or retyped: a value it would change is set aside row by row
  (value_fit.py says which, and warns at start).

Running it is idempotent and safe beside another sink starting on the same database:
under a named lock the plan is made again from what the server has then (MySQL 8
has no ``ADD COLUMN IF NOT EXISTS``), and a crash between the DDL and the first batch
leaves a table the next start finds done. Each statement waits at most
``LOCK_WAIT_SECONDS`` for the table's metadata lock, so an ALTER never queues every
reader of the table behind it for long; then the start retries within its outage
budget.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

import pyarrow as pa
from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import DBAPIError

from wal_sink.errors import TransientError, first_line
from wal_sink.mysql.column_types import Dialect, mysql_type, text_key_bytes
from wal_sink.mysql.errors import error_code
from wal_sink.mysql.identifiers import quoted
from wal_sink.mysql.named_lock import named_lock

LOCK_WAIT_SECONDS = 10
LOCK_WAIT_TIMEOUT = 1205


@dataclass(frozen=True)
class TablePlan:
    """What the target lacks for a stream, as DDL."""

    table: str
    create: str | None
    """CREATE TABLE, when the table does not exist."""
    add: tuple[str, ...] = ()
    """ALTER TABLE … ADD COLUMN, one per stream column the table lacks."""
    missing: tuple[str, ...] = ()
    """The stream columns those add."""

    @property
    def statements(self) -> list[str]:
        return ([self.create] if self.create else []) + list(self.add)


def plan_table(
    conn: Connection, table: str, key: Sequence[str], schema: pa.Schema
) -> TablePlan:
    """The DDL that gives ``table`` every column of ``schema`` (the stream's, without
    the WAL's own columns), keyed by ``key``, as the server is now."""
    dialect = Dialect(mariadb=conn.dialect.is_mariadb)
    quote = partial(quoted, conn.dialect)
    existing = table_columns(conn, table)
    room = text_key_bytes([schema.field(k) for k in key if k in schema.names])

    def column(field: pa.Field) -> str:
        is_key = field.name in key
        kind = mysql_type(field, dialect, key=is_key, key_bytes=room)
        return f"{quote(field.name)} {kind} {'NOT NULL' if is_key else 'NULL'}"

    if not existing:
        keys = ", ".join(quote(k) for k in key)
        body = ", ".join([*(column(f) for f in schema), f"PRIMARY KEY ({keys})"])
        return TablePlan(
            table,
            f"CREATE TABLE {quote(table)} ({body}) ENGINE=InnoDB "
            f"DEFAULT CHARSET=utf8mb4 COLLATE={dialect.text_collation}",
        )
    lacking = [f for f in schema if f.name.lower() not in existing]
    return TablePlan(
        table,
        None,
        tuple(f"ALTER TABLE {quote(table)} ADD COLUMN {column(f)}" for f in lacking),
        tuple(f.name for f in lacking),
    )


def run_plan(
    engine: Engine,
    table: str,
    key: Sequence[str],
    schema: pa.Schema,
    *,
    create: bool,
    evolve: bool,
) -> TablePlan:
    """Create or evolve ``table`` as allowed, under the named lock, planning again
    from what the server has then; returns the plan that was run (what is left
    undone, not allowed, is in it too)."""
    with (
        engine.connect() as conn,
        named_lock(conn, f"wal_sink:{table}", f"the set-up of table {table}"),
    ):
        conn.execute(text(f"SET SESSION lock_wait_timeout = {LOCK_WAIT_SECONDS}"))
        plan = plan_table(conn, table, key, schema)
        todo = [plan.create] if plan.create and create else []
        if plan.create is None and evolve:
            todo += plan.add
        for statement in todo:
            try:
                conn.execute(text(statement))
            except DBAPIError as e:
                if error_code(e) != LOCK_WAIT_TIMEOUT:
                    raise
                raise TransientError(
                    f"table {table} stayed locked by other sessions for "
                    f"{LOCK_WAIT_SECONDS} s while the sink changed it: "
                    f"{first_line(e.orig)}",
                    table=table,
                ) from None
        return plan


def table_columns(conn: Connection, table: str) -> dict[str, str]:
    """The table's columns (lower-case names) with their type, none when it does
    not exist."""
    return {
        name.lower(): column_type.lower()
        for name, column_type in conn.execute(
            text(
                "SELECT COLUMN_NAME, COLUMN_TYPE FROM information_schema.COLUMNS "
                "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = :t"
            ),
            {"t": table},
        )
    }
