"""SQL for the merge semantics (DESIGN.md §2): overwrite, add, keep, the version
guard and CDC deletes.

Statements are SQLAlchemy Core objects executed with bound parameters, so identifiers
are quoted by SQLAlchemy and the dialect decides how to name the incoming row
(MariaDB's ``VALUES(col)``, MySQL 8's row alias).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Delete,
    Table,
    and_,
    bindparam,
    case,
    delete,
    func,
    literal_column,
)
from sqlalchemy.dialects.mysql import Insert, insert

from wal_sink.config import MysqlConfig
from wal_sink.errors import TerminalError

# The UPDATE clause must hold no bound parameters: PyMySQL's multi-row executemany
# repeats only the VALUES part, so constants there are literal SQL.
ZERO = literal_column("0")


def build_upsert(table: Table, columns: Sequence[str], mysql: MysqlConfig) -> Insert:
    """INSERT … ON DUPLICATE KEY UPDATE for rows carrying ``columns``."""
    stmt = insert(table)
    return stmt.on_duplicate_key_update(
        update_assignments(table, columns, mysql, stmt.inserted)
    )


def update_assignments(
    table: Table, columns: Sequence[str], mysql: MysqlConfig, new: Any
) -> list[tuple[str, ColumnElement]]:
    """The ON DUPLICATE KEY UPDATE list; ``new`` names the incoming row.

    Key columns are never updated, ``keep`` columns only set on insert, ``add``
    columns add the incoming value, ``overwrite`` columns take it — guarded by the
    version column when one is configured. The version column is assigned last:
    MySQL evaluates the assignments left to right and later ones see earlier results.
    """
    _check_columns(table, columns, mysql)
    version = mysql.version_column if mysql.version_column in columns else None
    newer: ColumnElement[bool] | None = None
    if version:
        stored_v = table.c[version]
        newer = stored_v.is_(None) | (new[version] >= stored_v)
    assignments: list[tuple[str, ColumnElement]] = []
    for name in columns:
        if name in mysql.key or name == version:
            continue
        policy = mysql.merge.get(name, "overwrite")
        if policy == "keep":
            continue
        if policy == "add":
            value = func.coalesce(table.c[name], ZERO) + func.coalesce(new[name], ZERO)
        elif newer is not None:
            value = case((newer, new[name]), else_=table.c[name])
        else:
            value = new[name]
        assignments.append((name, value))
    if version:
        assignments.append(
            (version, case((newer, new[version]), else_=table.c[version]))
        )
    if not assignments:
        first_key = mysql.key[0]
        assignments.append((first_key, table.c[first_key]))
    return assignments


def build_delete(table: Table, mysql: MysqlConfig) -> Delete:
    """DELETE by key, executed with one parameter set per deleted row."""
    return delete(table).where(and_(*[table.c[k] == bindparam(k) for k in mysql.key]))


def _check_columns(table: Table, columns: Sequence[str], mysql: MysqlConfig) -> None:
    missing = [c for c in columns if c not in table.c]
    if missing:
        raise TerminalError(
            f"stream column(s) {', '.join(missing)} do not exist in the target; "
            "select only the table's columns in [transform]",
            table=table.name,
        )
    absent_keys = [k for k in mysql.key if k not in columns]
    if absent_keys:
        raise TerminalError(
            f"key column(s) {', '.join(absent_keys)} are missing from the stream",
            table=table.name,
        )
