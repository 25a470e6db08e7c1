"""The sink's own MySQL tables: acks (what is applied; with several target tables
also the per-table counts beside them), leases (who may apply), the quarantine
outbox (rows set aside, on their way to the quarantine table) and the retry table
(quarantine entries a retry applied, or tried and failed).

``sql/wal_sink_tables.sql`` is the same DDL for DBAs; a unit test keeps the two equal.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import (
    BigInteger,
    Column,
    Connection,
    Engine,
    Index,
    MetaData,
    String,
    Table,
    Text,
    inspect,
    text,
)
from sqlalchemy.dialects.mysql import CHAR, DATETIME, LONGTEXT
from sqlalchemy.exc import DBAPIError

from wal_sink.config import MysqlConfig
from wal_sink.errors import ConfigError, first_line
from wal_sink.mysql.errors import error_code
from wal_sink.mysql.identifiers import quoted

SINK_ID_LENGTH = 128
APPLY_ID_LENGTH = 32
ENTRY_ID_LENGTH = 96
ACCESS_DENIED = frozenset({1142, 1143, 1044, 1045})
APPLIED = "applied"
QUARANTINED = "quarantined"
"""Ack states: the batch's rows were applied, or the whole batch was set aside
(``wal-sink quarantine-batch``) and never applied."""
ADDED_ACK_COLUMNS = {
    "apply_id": ("CHAR(32) NULL", "0.2"),
    "state": (f"VARCHAR(16) NOT NULL DEFAULT '{APPLIED}'", "0.3"),
    "skipped_count": ("BIGINT NOT NULL DEFAULT 0", "0.3"),
}
"""Ack columns later versions added, with their DDL and that version: a table made
earlier gets them from init-db or the job, when the user may ALTER it."""


@dataclass(frozen=True)
class SinkTables:
    ack: Table
    lease: Table
    outbox: Table
    retry: Table
    ack_tables: Table | None = None
    """Per-table counts of each applied batch, with several tables."""


def table_comment(conn: Connection, name: str) -> str:
    """The comment of table ``name`` of the connection's database (the sink's
    tables beside a target name the target in theirs)."""
    return conn.execute(
        text(
            "SELECT TABLE_COMMENT FROM information_schema.TABLES "
            "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = :t"
        ),
        {"t": name},
    ).scalar_one()


def sink_tables(mysql: MysqlConfig) -> SinkTables:
    """The sink's tables, named as the config says."""
    metadata = MetaData()
    ack = Table(
        mysql.ack_table,
        metadata,
        Column("sink_id", String(SINK_ID_LENGTH), primary_key=True),
        Column("batch_id", BigInteger, primary_key=True, autoincrement=False),
        Column("row_count", BigInteger, nullable=False),
        Column("deleted_count", BigInteger, nullable=False),
        Column("quarantined", BigInteger, nullable=False),
        Column("epoch", BigInteger, nullable=False),
        Column("committed_at", DATETIME(fsp=6), nullable=False),
        Column("apply_id", CHAR(APPLY_ID_LENGTH)),
        Column("state", String(16), nullable=False, server_default=APPLIED),
        Column("skipped_count", BigInteger, nullable=False, server_default="0"),
        mysql_engine="InnoDB",
    )
    lease = Table(
        mysql.lease_table,
        metadata,
        Column("sink_id", String(SINK_ID_LENGTH), primary_key=True),
        Column("epoch", BigInteger, nullable=False),
        Column("holder", String(255), nullable=False),
        Column("acquired_at", DATETIME(fsp=6), nullable=False),
        mysql_engine="InnoDB",
    )
    outbox = Table(
        mysql.outbox_table,
        metadata,
        Column("id", BigInteger, primary_key=True, autoincrement=True),
        Column("sink_id", String(SINK_ID_LENGTH), nullable=False),
        Column("apply_id", CHAR(APPLY_ID_LENGTH), nullable=False),
        Column("batch_id", BigInteger, nullable=False),
        Column("reason", Text, nullable=False),
        Column("record", LONGTEXT, nullable=False),
        Column("recorded_at", DATETIME(fsp=6), nullable=False),
        Index(f"{mysql.outbox_table}_sink", "sink_id", "id"),
        mysql_engine="InnoDB",
    )
    retry = Table(
        mysql.retry_table,
        metadata,
        Column("sink_id", String(SINK_ID_LENGTH), primary_key=True),
        Column("entry_id", String(ENTRY_ID_LENGTH), primary_key=True),
        Column("batch_id", BigInteger, nullable=False),
        Column("state", String(16), nullable=False),
        Column("retry_id", CHAR(APPLY_ID_LENGTH), nullable=False),
        Column("reason", Text),
        Column("retried_at", DATETIME(fsp=6), nullable=False),
        mysql_engine="InnoDB",
    )
    ack_tables = None
    if mysql.tables:
        ack_tables = Table(
            mysql.ack_tables_table,
            metadata,
            Column("sink_id", String(SINK_ID_LENGTH), primary_key=True),
            Column("batch_id", BigInteger, primary_key=True, autoincrement=False),
            Column("table_name", String(64), primary_key=True),
            Column("row_count", BigInteger, nullable=False),
            Column("deleted_count", BigInteger, nullable=False),
            Column("quarantined", BigInteger, nullable=False),
            Column("skipped_count", BigInteger, nullable=False),
            mysql_engine="InnoDB",
        )
    return SinkTables(ack, lease, outbox, retry, ack_tables)


def init_db(engine: Engine, mysql: MysqlConfig) -> list[str]:
    """Create the sink's tables if they do not exist (idempotent), and add the ack
    columns of later versions to an ack table an earlier one created. Returns the
    tables' names: ack, lease, outbox, retry and, with several target tables, the
    per-table counts' table.

    Raises:
        ConfigError: a table or column of a later version is missing and this user
            may not add it (it names the upgrade script).
    """
    tables = sink_tables(mysql)
    metadata = tables.ack.metadata
    created = [tables.ack, tables.lease, tables.outbox]
    if tables.ack_tables is not None:
        created.append(tables.ack_tables)
    metadata.create_all(engine, created)
    _create_retry_table(engine, tables.retry)
    with engine.connect() as conn:
        columns = {c["name"] for c in inspect(conn).get_columns(tables.ack.name)}
    name = quoted(engine.dialect, tables.ack.name)
    for column, (ddl, version) in ADDED_ACK_COLUMNS.items():
        if column in columns:
            continue
        try:
            with engine.begin() as conn:
                conn.execute(text(f"ALTER TABLE {name} ADD COLUMN {column} {ddl}"))
        except DBAPIError as e:
            if error_code(e) not in ACCESS_DENIED:
                raise
            raise ConfigError(
                f"the ack table {tables.ack.name} lacks column {column} (added in "
                f"{version}) and this user may not add it ({first_line(e.orig)}): "
                f"run sql/upgrade_{version}.sql as a user allowed to ALTER it"
            ) from None
    made = (tables.ack, tables.lease, tables.outbox, tables.retry, tables.ack_tables)
    return [t.name for t in made if t is not None]


def _create_retry_table(engine: Engine, retry: Table) -> None:
    """The retry table (0.4), or one line naming the upgrade script when this user
    may not create it."""
    try:
        retry.create(engine, checkfirst=True)
    except DBAPIError as e:
        if error_code(e) not in ACCESS_DENIED:
            raise
        raise ConfigError(
            f"the retry table {retry.name} (added in 0.4) is missing or this user "
            f"holds no grant on it, and may not create it ({first_line(e.orig)}): "
            "grant the sink's user its privileges on it (sql/grants.sql), or run "
            "sql/upgrade_0.4.sql as a user allowed to CREATE it"
        ) from None
