"""Which MySQL errors a retry of the whole batch transaction can cure
(docs/failures.md)."""

from __future__ import annotations

from sqlalchemy.exc import DBAPIError

from wal_sink.errors import TerminalError, TransientError, WalSinkError, first_line

# deadlock, lock wait timeout, snapshot conflict, can't connect, too many connections,
# server gone away, lost connection, read-only (failover), read-only (super_read_only)
TRANSIENT_CODES = frozenset({1213, 1205, 1020, 2003, 1040, 2006, 2013, 1290, 1836})
DUPLICATE_KEY = 1062
# Errors about one row's values: isolate the row and quarantine it (docs/failures.md).
# null into NOT NULL, duplicate on another unique key, out of range, data truncated
# (a bad ENUM or SET value, a number with trailing text), bad datetime, no default,
# bad value, too long, a computed value out of range (an `add` column past BIGINT),
# a deleted parent row still referenced, a missing parent row, invalid JSON (MySQL
# 8), check constraint (MySQL, MariaDB: also its JSON columns' json_valid), a
# trigger refusing the row (SIGNAL).
ROW_ERRORS = frozenset(
    {1048, 1062, 1264, 1265, 1292, 1364, 1366, 1406, 1451, 1452, 1644, 1690, 3140}
    | {3819, 4025}
)
# Raised on purpose by the upsert when a row would reach another key's row through
# another unique index (a division by zero, see upsert.py): that row is set aside.
ANOTHER_ROW = 1365


def error_code(exc: BaseException) -> int | None:
    """The MySQL error number behind a SQLAlchemy/PyMySQL exception, if any."""
    orig = exc.orig if isinstance(exc, DBAPIError) else exc
    args = getattr(orig, "args", ())
    if args and isinstance(args[0], int):
        return args[0]
    return None


def is_transient(exc: BaseException) -> bool:
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return True
    return error_code(exc) in TRANSIENT_CODES


def is_row_error(exc: BaseException) -> bool:
    code = error_code(exc)
    return code in ROW_ERRORS or code == ANOTHER_ROW


def mysql_error(
    exc: DBAPIError,
    *,
    sink_id: str | None = None,
    batch_id: int | None = None,
    table: str | None = None,
) -> WalSinkError:
    """The sink's error for a MySQL failure: transient (retry the unit of work) or
    terminal, with one line naming the error number.

    ``exc`` loses its statement and parameters, as it stays the cause in tracebacks
    (Spark prints the whole chain when it leaves ``foreachBatch``): a multi-row
    statement holds up to 1 MB of row values, rendered into its text where
    ``hide_parameters`` cannot hide them. The server's own message is kept; it
    quotes at most a cut value of one row.
    """
    exc.statement = None
    exc.params = None
    code = error_code(exc)
    args = getattr(exc.orig, "args", ())
    text = args[1] if len(args) > 1 and isinstance(args[1], str) else exc.orig
    reason = f"MySQL error {code}: {first_line(text)}" if code else first_line(exc)
    if is_transient(exc):
        return TransientError(reason, sink_id=sink_id, batch_id=batch_id)
    return TerminalError(reason, sink_id=sink_id, batch_id=batch_id, table=table)
