"""Row by row: the way a chunk takes when the Arrow-rendered paths cannot
(chunk_path.py), and the only one for CDC. The chunk's rows as Python values, which
PyMySQL renders value by value, split into runs of upserts and deletes in staged
order; rows no MySQL column
can store (a null key, NaN or infinity) set aside before they are sent; rows MySQL
rejects isolated under savepoints by bisecting the run, and set aside with MySQL's
reason, while the rest is applied in order.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from sqlalchemy import Connection, Executable
from sqlalchemy.exc import DBAPIError

from wal_sink.errors import first_line
from wal_sink.merge.modes import ByKey
from wal_sink.mysql.errors import error_code, is_row_error
from wal_sink.mysql.upsert import update_params
from wal_sink.wal.quarantine import Entry

ByKeyColumns = tuple[tuple[str, ByKey], ...]
"""The columns whose merge mode sends some values by key, with those values."""
RefusalReason = Callable[[Connection, dict[str, Any], DBAPIError], str]
"""Why MySQL refused one row, as its quarantine entry says."""


def split_runs(
    rows: list[dict[str, Any]], op_column: str | None, delete_values: tuple[str, ...]
) -> Iterator[tuple[bool, list[dict[str, Any]], dict[int, Any]]]:
    """Split a chunk's rows into consecutive runs of upserts and deletes, order
    kept; the op column leaves each row, its value kept by the row's ``id``."""
    if op_column is None:
        yield False, rows, {}
        return
    run: list[dict[str, Any]] = []
    ops: dict[int, Any] = {}
    run_is_delete = False
    for row in rows:
        op = row.pop(op_column)
        is_delete = op in delete_values
        if run and is_delete != run_is_delete:
            yield run_is_delete, run, ops
            run, ops = [], {}
        run_is_delete = is_delete
        run.append(row)
        ops[id(row)] = op
    if run:
        yield run_is_delete, run, ops


def python_rows(chunk: pa.RecordBatch) -> list[dict[str, Any]]:
    """Rows as dicts for PyMySQL; zoned timestamps become naive UTC (session TZ)."""
    columns = []
    for field_, column in zip(chunk.schema, chunk.columns):
        if pa.types.is_timestamp(field_.type) and field_.type.tz is not None:
            column = column.cast(pa.timestamp(field_.type.unit))
        columns.append(column)
    return pa.RecordBatch.from_arrays(columns, names=chunk.schema.names).to_pylist()


def drop_null_keys(
    run: list[dict[str, Any]], key: tuple[str, ...], bad: list[Entry]
) -> list[dict[str, Any]]:
    kept = []
    for row in run:
        missing = [k for k in key if row.get(k) is None]
        if missing:
            bad.append(Entry(row, f"null key column(s): {', '.join(missing)}"))
        else:
            kept.append(row)
    return kept


def drop_non_finite(
    run: list[dict[str, Any]], bad: list[Entry]
) -> list[dict[str, Any]]:
    """Rows to upsert holding a NaN or infinite float: no MySQL column can store one
    (PyMySQL refuses them before the server sees them)."""
    kept = []
    for row in run:
        not_finite = [
            c for c, v in row.items() if isinstance(v, float) and not math.isfinite(v)
        ]
        if not_finite:
            bad.append(
                Entry(
                    row,
                    f"NaN or infinity in column(s): {', '.join(not_finite)}; "
                    "MySQL cannot store it",
                )
            )
        else:
            kept.append(row)
    return kept


def refused(conn: Connection, row: dict[str, Any], e: DBAPIError) -> str:
    """The reason a row MySQL rejected is set aside: MySQL's own."""
    return f"MySQL error {error_code(e)}: {first_line(e.orig)}"


def isolating(
    conn: Connection,
    stmt: Executable,
    rows: list[dict[str, Any]],
    bad: list[Entry],
    reason: RefusalReason = refused,
) -> int:
    """Execute ``stmt`` for ``rows`` under a savepoint; when MySQL rejects a row's
    values, bisect to find the rejected rows, set them aside with ``reason``, apply
    the rest in order. Returns how many rows were applied."""
    if not rows:
        return 0
    savepoint = conn.begin_nested()
    try:
        conn.execute(stmt, rows)
    except DBAPIError as e:
        # Anything but a row error (a deadlock, a lost link) may have ended the
        # whole transaction, savepoint included: leave it to the transaction.
        if not is_row_error(e):
            raise
        savepoint.rollback()
        if len(rows) == 1:
            bad.append(Entry(rows[0], reason(conn, rows[0], e)))
            return 0
    else:
        savepoint.commit()
        return len(rows)
    middle = len(rows) // 2
    return isolating(conn, stmt, rows[:middle], bad, reason) + isolating(
        conn, stmt, rows[middle:], bad, reason
    )


def needs_update(
    run: list[dict[str, Any]], by_key: ByKeyColumns
) -> Iterator[tuple[bool, list[dict[str, Any]]]]:
    """A run of upserts in order, as segments: ``(True, [row])`` for a row holding
    a value its INSERT cannot carry (a merge mode's ``by_key``; upsert.build_update
    says why), ``(False, rows)`` for the consecutive rows between them."""
    if not by_key:
        yield False, run
        return
    plain: list[dict[str, Any]] = []
    for row in run:
        if any(way.held(row.get(c)) for c, way in by_key):
            if plain:
                yield False, plain
                plain = []
            yield True, [row]
        else:
            plain.append(row)
    if plain:
        yield False, plain


@dataclass(frozen=True)
class ByKeyWay:
    """How a row ``needs_update`` singles out is applied (upsert.py builds them)."""

    columns: ByKeyColumns
    update: Executable
    """``UPDATE … WHERE <key>`` with the upsert's assignments."""
    values_check: Executable
    """The upsert's INSERT, rolled back: MySQL judges the record's values."""
    stored: Executable
    """The key's stored values of ``columns``."""


def updating(
    conn: Connection,
    way: ByKeyWay,
    upsert: Executable,
    row: dict[str, Any],
    bad: list[Entry],
    reason: RefusalReason = refused,
) -> int:
    """Apply one row by key with ``way.update`` (under a savepoint, set aside when
    MySQL refuses it). A key without a row (the UPDATE, a locking read, matched
    none) is set aside for a NULL whose ``ByKey.null_new_key`` says so, and goes
    to ``isolating(upsert)`` otherwise, whose INSERT refuses what it cannot
    carry. Returns how many rows were applied (0 or 1).

    The UPDATE assigns an older record's guarded columns their stored values, so
    MySQL would not judge the record's own: ``way.values_check``, run after it
    and rolled back, with the row's values as they are now standing in for those
    the INSERT cannot carry, refuses what the upsert would (a NULL for NOT NULL, a
    text too long), and the UPDATE with it. The row is read after the UPDATE,
    which has locked it: another writer's insert or delete of the key before then
    is seen, none after."""
    params = update_params(row)
    held = [(c, w) for c, w in way.columns if w.held(row.get(c))]
    savepoint = conn.begin_nested()
    try:
        matched = conn.execute(way.update, params).rowcount
        if matched:
            now = conn.execute(way.stored, params).one()._mapping
            check = conn.begin_nested()
            try:
                conn.execute(way.values_check, {**row, **{c: now[c] for c, _ in held}})
            finally:
                check.rollback()
    except DBAPIError as e:
        if not is_row_error(e):
            raise
        savepoint.rollback()
        bad.append(Entry(row, reason(conn, row, e)))
        return 0
    savepoint.commit()
    if matched:
        return 1
    refused_new = _new_key_refusal(row, held)
    if refused_new:
        bad.append(Entry(row, refused_new))
        return 0
    return isolating(conn, upsert, [row], bad, reason)


def _new_key_refusal(row: dict[str, Any], held: list[tuple[str, ByKey]]) -> str | None:
    """Why a new key's record is set aside for its NULLs in ``held`` columns;
    None when the upsert judges its values."""
    columns: dict[str, list[str]] = {}
    for column, way in held:
        if row.get(column) is None and way.null_new_key:
            columns.setdefault(way.null_new_key, []).append(column)
    said = [why.format(columns=", ".join(c)) for why, c in columns.items()]
    return "; ".join(said) or None
