"""SQL for the merge semantics (docs/merge.md): the merge modes' assignments
(merge/modes.py), the version guard, the guard against reaching another row, and
CDC deletes.

Statements are SQLAlchemy Core objects executed with bound parameters, so identifiers
are quoted by SQLAlchemy and the dialect decides how to name the incoming row
(MariaDB's ``VALUES(col)``, MySQL 8's row alias).

``INSERT … ON DUPLICATE KEY UPDATE`` updates the row of whichever unique index the
insert collides with first (InnoDB checks the PRIMARY KEY, then the secondary unique
indexes). With another unique index than ``mysql.key`` that can be another row's: a
new key whose e-mail another key holds would update that other row. So the update
first checks that the row it reached has the incoming row's key, and otherwise fails
the statement with MySQL's own error 1365 (division by zero, an error in the strict
mode every sink session runs in). The caller isolates that row and sets it aside.

The server decides, row by row in staged order, with its own comparison rules
(collations, trailing spaces, prefix indexes, generated columns, defaults of columns
the stream does not write) and under the insert's own locks: a row that conflicts
with an earlier row of the batch fails (the first wins), a value an earlier row moved
away from is free again, and a concurrent writer cannot slip in between a check and
the write, as there is none. Nothing is read ahead, so the fast paths cost nothing
more. A row whose key exists when ``mysql.key`` is the PRIMARY KEY always reaches its
own row (the PRIMARY KEY is checked first), and a collision of its new values is
MySQL's error 1062 for that row, set aside the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Delete,
    Select,
    Table,
    Update,
    and_,
    bindparam,
    case,
    delete,
    func,
    literal_column,
    select,
    update,
)
from sqlalchemy.dialects.mysql import Insert, insert

from wal_sink.config import Target
from wal_sink.errors import TerminalError
from wal_sink.mysql.server_clock import clock_defaults, clock_updates

# The UPDATE clause must hold no bound parameters: PyMySQL's multi-row executemany
# repeats only the VALUES part, so constants there are literal SQL.
# Fails the statement in strict mode (ERROR_FOR_DIVISION_BY_ZERO) when evaluated:
# the upsert reached a row of another key (see the module docstring).
ANOTHER_ROW = literal_column("1/0")


def build_upsert(table: Table, columns: Sequence[str], mysql: Target) -> Insert:
    """INSERT … ON DUPLICATE KEY UPDATE for rows carrying ``columns``."""
    stmt = insert(table)
    defaults = clock_defaults(table, columns)  # server_clock.py says why
    if defaults:
        stmt = stmt.values(defaults)
    # SQLAlchemy 2.1 escapes a '%' of a column name twice in ``stmt.inserted``
    # (VALUES(`a%%%%b`), new.`a%%%%b`), and MySQL then finds no column `a%%b`:
    # such a column is read as VALUES(table.col), which it escapes once.
    incoming = {
        c.name: func.values(c) if "%" in c.name else stmt.inserted[c.name]
        for c in table.columns
    }
    return stmt.on_duplicate_key_update(
        update_assignments(table, columns, mysql, incoming)
    )


def update_assignments(
    table: Table, columns: Sequence[str], mysql: Target, new: Any
) -> list[tuple[str, ColumnElement]]:
    """The ON DUPLICATE KEY UPDATE list; ``new`` names the incoming row.

    The first assignment fails the statement when the row reached has another key
    (the module docstring says why). Every key column is assigned to itself: a
    column MySQL updates by itself (``ON UPDATE CURRENT_TIMESTAMP``) keeps its
    value when the statement assigns it, so "never changed" holds whatever the
    table says. Every other column the stream writes gets its merge mode's
    assignment (merge/modes.py), given the version guard when a version column is
    configured. The version column is assigned last: MySQL evaluates the
    assignments left to right and later ones see earlier results. A ``DATETIME``
    column with ``ON UPDATE CURRENT_TIMESTAMP`` the stream does not write is
    assigned right after the keys (server_clock.py).
    """
    _check_columns(table, columns, mysql)
    first_key = mysql.key[0]
    same_row = and_(*[table.c[k] == new[k] for k in mysql.key])
    assignments: list[tuple[str, ColumnElement]] = [
        (first_key, case((same_row, table.c[first_key]), else_=ANOTHER_ROW))
    ]
    assignments += [(k, table.c[k]) for k in mysql.key[1:]]
    keys = len(assignments)
    version = mysql.version_column if mysql.version_column in columns else None
    newer: ColumnElement[bool] | None = None
    if version:
        stored_v = table.c[version]
        newer = stored_v.is_(None) | (new[version] >= stored_v)
    for name in columns:
        if name in mysql.key or name == version:
            continue
        mode = mysql.mode(name)
        assignments.append((name, mode.assignment(table.c[name], new[name], newer)))
    if version:
        assignments.append(
            (version, case((newer, new[version]), else_=table.c[version]))
        )
    assignments[keys:keys] = clock_updates(table, columns, assignments[keys:])
    return assignments


UPDATE_PARAM = "_wal_new_"
"""Prefix of the by-key UPDATE's parameters: a parameter named as a column is
reserved for the SET clause."""


def build_update(table: Table, columns: Sequence[str], mysql: Target) -> Update:
    """``UPDATE … SET <the upsert's assignments> WHERE <key>`` for one row, with
    parameters named by ``update_params``: for a row the upsert's INSERT cannot
    carry although the assignments take it (a merge mode's ``by_key`` values: a
    negative amount for an UNSIGNED ``add`` column, a NULL kept for a NOT NULL
    column). Its rowcount (matched rows, the dialect's FOUND_ROWS)
    says whether the key had a row; when not, the upsert inserts it, and MySQL
    refuses the negative amount as any out-of-range value."""
    new = {c: bindparam(UPDATE_PARAM + c) for c in columns}
    where = and_(*[table.c[k] == new[k] for k in mysql.key])
    return (
        update(table)
        .where(where)
        .ordered_values(*update_assignments(table, columns, mysql, new))
    )


def build_values_check(table: Table, columns: Sequence[str], mysql: Target) -> Insert:
    """``INSERT … ON DUPLICATE KEY UPDATE <key> = <key>`` for rows carrying
    ``columns``: run before a by-key UPDATE (and rolled back), so that MySQL judges
    the record's values as the upsert's INSERT would, whatever the UPDATE assigns."""
    _check_columns(table, columns, mysql)
    first_key = mysql.key[0]
    return insert(table).on_duplicate_key_update({first_key: table.c[first_key]})


def build_stored(table: Table, columns: Sequence[str], mysql: Target) -> Select:
    """The values of ``columns`` in the row of a record's key, read as they are
    now (a locking read), with ``build_update``'s parameters (``update_params``):
    what a record gone by key puts in its values check where its own value is one
    the INSERT cannot carry (protocol/row_by_row.py)."""
    where = and_(*[table.c[k] == bindparam(UPDATE_PARAM + k) for k in mysql.key])
    return select(*[table.c[c] for c in columns]).where(where).with_for_update()


def update_params(row: dict[str, Any]) -> dict[str, Any]:
    """A row's values as ``build_update``'s parameters."""
    return {UPDATE_PARAM + c: v for c, v in row.items()}


def build_delete(table: Table, mysql: Target, versioned: bool = False) -> Delete:
    """DELETE by key, executed with one parameter set per deleted row (the key's
    columns, and the version column when ``versioned``: the rows carry it).

    With a version a delete only removes a row whose stored version is NULL or not
    newer than its own: an older delete arriving late never removes newer data, and
    a delete beats an upsert of the same version."""
    where = and_(*[table.c[k] == bindparam(k) for k in mysql.key])
    if versioned and mysql.version_column:
        stored = table.c[mysql.version_column]
        where = where & (stored.is_(None) | (stored <= bindparam(mysql.version_column)))
    return delete(table).where(where)


def _check_columns(table: Table, columns: Sequence[str], mysql: Target) -> None:
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
