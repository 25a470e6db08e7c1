"""Checks run before the first batch, so a wrong table or server setting is one clear
line at start instead of a failure in the middle of a stream (docs/failures.md)."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from sqlalchemy import Connection, Engine, Table, inspect, text
from sqlalchemy.types import Date, DateTime, Float, Integer, Numeric, Time

from wal_sink.config import Config, Target
from wal_sink.config.spelling import Spelling, spelled_target
from wal_sink.errors import ConfigError
from wal_sink.mysql.history import check_history_table
from wal_sink.mysql.multi_row import MAX_STATEMENT_BYTES
from wal_sink.mysql.tombstone_checks import refuse_unguarded
from wal_sink.mysql.write_checks import check_writes, visibility_warnings

# SQLAlchemy 2.1's Float is not a Numeric subclass: name both.
NUMBERS = (Integer, Numeric, Float)

# A statement of MAX_STATEMENT_BYTES with its INSERT and ON DUPLICATE KEY UPDATE
# parts fits in a packet of 1 MiB.
MIN_PACKET = 1_048_576

log = logging.getLogger(__name__)


def preflight(
    engine: Engine,
    config: Config,
    target: Target,
    table: Table,
    stream_columns: Iterable[str] = (),
) -> list[str]:
    """Raise ConfigError for the first problem of ``target`` (``table`` reflected);
    return warnings worth logging.

    ``stream_columns`` are the columns the table receives (the job's query's), if
    known: what they cannot write as configured is refused here, before the lease
    is taken (write_checks.py); the committer checks each staged schema again.
    The config's names match the table's ignoring case, as MySQL's do."""
    target = spelled_target(target, Spelling(table.c.keys()))
    with engine.connect() as conn:
        if target.scd_type == 2:
            check_history_table(conn, target)
        else:
            _check_key(conn, target, table)
        _check_columns(target, table)
        profile = check_writes(conn, config, target, stream_columns)
        if target.scd_type == 1:
            refuse_unguarded(conn, config, target)
        _check_strict(conn)
        _check_packet(conn)
        warnings = _durability_warnings(conn) + visibility_warnings(profile)
    for warning in warnings:
        log.warning("%s", warning)
    return warnings


def _check_key(conn: Connection, mysql: Target, target: Table) -> None:
    inspector = inspect(conn)
    wanted = set(mysql.key)
    keys = {"PRIMARY": inspector.get_pk_constraint(target.name)["constrained_columns"]}
    for index in inspector.get_indexes(target.name):
        if index.get("unique"):
            keys[index["name"]] = index["column_names"]
    if not any(set(cols) == wanted for cols in keys.values()):
        found = (
            "; ".join(f"{n}({', '.join(c)})" for n, c in keys.items() if c) or "none"
        )
        raise ConfigError(
            f"{mysql.where}.key ({', '.join(mysql.key)}) is not the PRIMARY KEY or a "
            f"UNIQUE key of table {target.name!r} (its keys: {found}); an upsert "
            "needs one"
        )


def _check_columns(mysql: Target, target: Table) -> None:
    at = mysql.where
    named = {f"{at}.key": list(mysql.key), f"{at}.merge": list(mysql.merge)}
    if mysql.version_column:
        named[f"{at}.version_column"] = [mysql.version_column]
    for where, columns in named.items():
        for column in columns:
            if column not in target.c:
                raise ConfigError(
                    f"{where}: column {column!r} does not exist in "
                    f"table {target.name!r}"
                )
    if mysql.version_column:
        kind = target.c[mysql.version_column].type
        if not isinstance(kind, (*NUMBERS, DateTime, Date, Time)):
            raise ConfigError(
                f"{at}.version_column {mysql.version_column!r} is {kind}; "
                "use a number or a date/time so versions compare in order"
            )


def _check_strict(conn: Connection) -> None:
    mode = conn.execute(text("SELECT @@SESSION.sql_mode")).scalar_one() or ""
    if "STRICT_ALL_TABLES" not in mode and "STRICT_TRANS_TABLES" not in mode:
        raise ConfigError(
            f"the MySQL session is not in strict SQL mode (sql_mode={mode!r}); bad "
            "values would be silently truncated. Allow the sink to set sql_mode"
        )
    _check_division_by_zero(mode)


def _check_packet(conn: Connection) -> None:
    """The sink sends statements of up to MAX_STATEMENT_BYTES, as PyMySQL's
    executemany does: under a smaller max_allowed_packet the server would drop the
    connection at every attempt, an outage to the sink that no retry cures."""
    packet = int(conn.execute(text("SELECT @@max_allowed_packet")).scalar_one())
    if packet < MIN_PACKET:
        raise ConfigError(
            f"the server's max_allowed_packet is {packet} bytes, and the sink sends "
            f"statements of up to {MAX_STATEMENT_BYTES} bytes: raise it to at least "
            f"{MIN_PACKET} (SET GLOBAL max_allowed_packet = {MIN_PACKET}, and "
            "max_allowed_packet in the server's configuration)"
        )


def _check_division_by_zero(mode: str) -> None:
    """The upsert's guard against reaching another key's row fails the statement
    with a division by zero (upsert.py), an error only in this mode."""
    if "ERROR_FOR_DIVISION_BY_ZERO" not in mode:
        raise ConfigError(
            f"the MySQL session's sql_mode ({mode!r}) lacks ERROR_FOR_DIVISION_BY_ZERO,"
            " which stops an upsert from reaching the row of another key through "
            "another unique index. Allow the sink to set sql_mode"
        )


def _durability_warnings(conn: Connection) -> list[str]:
    flush = conn.execute(
        text("SELECT @@GLOBAL.innodb_flush_log_at_trx_commit")
    ).scalar_one()
    if str(flush) != "1":
        return [
            f"innodb_flush_log_at_trx_commit is {flush}, not 1: a server crash can "
            "lose the last second of committed batches together with their acks; "
            "recovery re-applies them from the WAL only while they are not purged"
        ]
    return []
