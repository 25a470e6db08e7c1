"""The sink's own MySQL tables: acks (what is applied) and leases (who may apply).

``sql/wal_sink_tables.sql`` is the same DDL for DBAs; a unit test keeps the two equal.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, Engine, MetaData, String, Table
from sqlalchemy.dialects.mysql import DATETIME

from wal_sink.config import MysqlConfig

SINK_ID_LENGTH = 128


def sink_tables(mysql: MysqlConfig) -> tuple[Table, Table]:
    """Return (ack, lease) Table objects named as the config says."""
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
    return ack, lease


def init_db(engine: Engine, mysql: MysqlConfig) -> None:
    """Create the ack and lease tables if they do not exist (idempotent)."""
    ack, _ = sink_tables(mysql)
    ack.metadata.create_all(engine, checkfirst=True)
