"""The fast path for upserts (``mysql.local_infile = true``): a chunk is loaded with
``LOAD DATA LOCAL INFILE`` into a session temporary table (the load table), then
applied with one set-based ``INSERT … SELECT … ON DUPLICATE KEY UPDATE`` in staged
order — inside the batch's own transaction, next to its ack row, so every invariant
holds.

It spares the client from rendering every value into SQL text, which is where the
row path spends most of its time. LOAD DATA LOCAL turns data errors into warnings
(the server cannot stop the client's file), so the load table holds every value
as text — nothing to convert, nothing to truncate — and any warning still sends the
chunk to the row path. The conversion into the target's types happens in the
INSERT … SELECT, where strict mode keeps errors errors. It needs the server's
``local_infile`` and MariaDB
(whose ``VALUES()`` works with ``INSERT … SELECT``); anything it cannot take — a
server that refuses, a type without a text form here, a row MySQL rejects — falls
back to the row path for that chunk, which isolates and quarantines bad rows.
"""

from __future__ import annotations

import logging
import os
import tempfile
import zlib
from collections.abc import Sequence

import pyarrow as pa
from sqlalchemy import (
    Connection,
    Engine,
    Table,
    column,
    literal_column,
    select,
    table,
    text,
)
from sqlalchemy.dialects.mysql import insert
from sqlalchemy.exc import DBAPIError

from wal_sink.config import Target
from wal_sink.errors import first_line
from wal_sink.mysql.arrow_text import renderable, tsv
from wal_sink.mysql.errors import error_code
from wal_sink.mysql.guarded_connection import GuardedConnection
from wal_sink.mysql.server_clock import clock_defaults
from wal_sink.mysql.upsert import update_assignments

log = logging.getLogger(__name__)

ROW_COLUMN = "_wal_row"
# MySQL 1148/3948/2068 and MariaDB 4166: local infile disabled on server or client.
LOCAL_INFILE_REFUSED = frozenset({1148, 2068, 3948, 4166})
# 1044: no CREATE TEMPORARY TABLES on the database (1142 on MySQL for the table).
TEMPORARY_TABLE_DENIED = frozenset({1044, 1142})
PROBE_TABLE = "_wal_sink_load_probe"


class BulkLoadRefused(Exception):
    """The server does not allow LOAD DATA LOCAL, or this user may not create the
    load table; use the row path from now on. The message says what to change."""


def say_refused(sink_id: str, reason: str) -> None:
    """The one warning of a sink whose LOAD DATA path is refused (``reason``, which
    says what to change)."""
    log.warning(
        "sink %s: mysql.local_infile: %s; using multi-row INSERTs instead",
        sink_id,
        reason,
    )


def load_table_refused(engine: Engine) -> str | None:
    """Why this user may not create a load table, as the line a warning carries
    (None: it may). A session temporary table needs CREATE TEMPORARY TABLES on the
    database, which no table-level grant gives."""
    try:
        with engine.connect() as conn:
            conn.execute(text(f"CREATE TEMPORARY TABLE {PROBE_TABLE} (x INT)"))
            conn.execute(text(f"DROP TEMPORARY TABLE {PROBE_TABLE}"))
    except DBAPIError as e:
        if error_code(e) not in TEMPORARY_TABLE_DENIED:
            raise
        return _temporary_tables_advice(e)
    return None


def _temporary_tables_advice(e: DBAPIError) -> str:
    return (
        f"CREATE TEMPORARY TABLE refused ({first_line(e.orig)}): GRANT CREATE "
        "TEMPORARY TABLES on the database to the sink's user, or set "
        "mysql.local_infile = false"
    )


class BulkLoadWarned(Exception):
    """LOAD DATA reported warnings for this chunk; use the row path for it."""


class BulkLoader:
    def __init__(
        self, target: Table, columns: Sequence[str], mysql: Target, sink_id: str
    ) -> None:
        self.target = target
        self.columns = list(columns)
        self.load_table = (
            f"_wal_sink_load_{zlib.crc32(f'{sink_id}/{target.name}'.encode())}"
        )
        loaded = table(self.load_table, *[column(c) for c in columns])
        clock = clock_defaults(target, columns)  # server_clock.py says why
        source = select(*[loaded.c[c] for c in columns], *clock.values()).order_by(
            literal_column(ROW_COLUMN)
        )
        stmt = insert(target).from_select([*self.columns, *clock], source)
        self.upsert = stmt.on_duplicate_key_update(
            update_assignments(target, self.columns, mysql, stmt.inserted)
        )

    @staticmethod
    def supports(conn: Connection, schema: pa.Schema) -> bool:
        """MariaDB, types with a text form, no '%' in a column name, and a
        connection of the sink's own engine, which sends the server no file but the
        one being loaded."""
        guarded = isinstance(conn.connection.dbapi_connection, GuardedConnection)
        if not guarded:
            log.warning(
                "mysql.local_infile: the engine was not made by the sink, so it "
                "could send the server any file it asks for; using multi-row "
                "INSERTs instead"
            )
        # A '%' in a column name: the statements here quote names for the driver's
        # formatting, and not every one of them is formatted; the row path takes it.
        plain = not any("%" in name for name in schema.names)
        return guarded and conn.dialect.is_mariadb and renderable(schema) and plain

    def apply(self, conn: Connection, chunk: pa.RecordBatch) -> int:
        """Upsert ``chunk`` set-based; raise BulkLoadRefused or a DBAPIError."""
        if chunk.num_rows == 0:
            return 0
        quote = conn.dialect.identifier_preparer.quote
        load_table = quote(self.load_table)
        names = ", ".join(quote(c) for c in self.columns)
        # utf8mb4 as the file is, whatever the database's default character set:
        # in latin1 a 4-byte character would only warn and send the chunk elsewhere.
        text_columns = ", ".join(
            f"{quote(c)} LONGTEXT CHARACTER SET utf8mb4" for c in self.columns
        )
        # Dropped and created per chunk: no DELETE of the last chunk's rows, server
        # temp space bounded by a chunk. Neither statement ends the transaction when
        # the table is TEMPORARY. The key on the row number spares a sort.
        conn.execute(text(f"DROP TEMPORARY TABLE IF EXISTS {load_table}"))
        try:
            conn.execute(
                text(
                    f"CREATE TEMPORARY TABLE {load_table} ({text_columns}, "
                    f"{ROW_COLUMN} BIGINT NOT NULL PRIMARY KEY) ENGINE=InnoDB"
                )
            )
        except DBAPIError as e:
            if error_code(e) in TEMPORARY_TABLE_DENIED:
                raise BulkLoadRefused(_temporary_tables_advice(e)) from e
            raise
        fd, path = tempfile.mkstemp(prefix="wal-sink-load-", suffix=".tsv")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(tsv(chunk, self.columns))
            try:
                with conn.connection.dbapi_connection.serving(path):
                    conn.exec_driver_sql(
                        f"LOAD DATA LOCAL INFILE %s INTO TABLE {load_table} CHARACTER "
                        "SET utf8mb4 FIELDS TERMINATED BY '\\t' ESCAPED BY '\\\\'"
                        " LINES TERMINATED BY '\\n'"
                        f" ({names}, {ROW_COLUMN})",
                        (path,),
                    )
            except DBAPIError as e:
                if error_code(e) in LOCAL_INFILE_REFUSED:
                    raise BulkLoadRefused(
                        f"LOAD DATA LOCAL INFILE refused ({first_line(e.orig)}): set "
                        "local_infile=1 on the server, or mysql.local_infile = false"
                    ) from e
                raise
            warnings = conn.exec_driver_sql("SELECT @@warning_count").scalar_one()
            if warnings:
                raise BulkLoadWarned(f"LOAD DATA reported {warnings} warning(s)")
        finally:
            os.unlink(path)
        conn.execute(self.upsert)
        return chunk.num_rows
