"""Where ``wal-sink verify --against`` finds what a target should hold, and reading
it: a Delta table (a path or an object-store URI, read by delta-rs's own query
engine, no Spark), a Parquet directory (pyarrow), or a MySQL table on the sink's
server, ``mysql://DATABASE.TABLE``.

With several tables and no ``--table``, SOURCE holds one per table: a directory
with a Delta table or a Parquet directory named after each, or ``mysql://DATABASE``
whose tables have the targets' names.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.dataset as ds
from deltalake import QueryBuilder
from deltalake.exceptions import TableNotFoundError
from sqlalchemy import Connection, text

from wal_sink.errors import ConfigError, first_line
from wal_sink.storage import Storage, join
from wal_sink.wal.format import delta_table

if TYPE_CHECKING:
    from wal_sink.protocol.sink_instance import SinkInstance

MYSQL = "mysql://"


@dataclass(frozen=True)
class Source:
    location: str
    """As given (a path, a URI, or mysql://DATABASE[.TABLE])."""
    database: str | None = None
    """A MySQL source's database."""
    table: str | None = None
    """A MySQL source's table."""

    @classmethod
    def parse(cls, given: str) -> Source:
        if not given.startswith(MYSQL):
            return cls(given)
        database, _, table = given[len(MYSQL) :].partition(".")
        if not database:
            raise ConfigError(
                f"--against {given}: name the table as mysql://DATABASE.TABLE"
            )
        return cls(given, database, table or None)

    def of(self, table: str, several: bool) -> Source:
        """The source of ``table``: this one, or with several tables, its part."""
        if not several:
            if self.database is not None and self.table is None:
                return replace(self, location=f"{self.location}.{table}", table=table)
            return self
        if self.database is not None:
            if self.table is not None:
                raise ConfigError(
                    f"--against {self.location} names one table and the sink writes "
                    "several: add --table, or give mysql://DATABASE"
                )
            return replace(self, location=f"{self.location}.{table}", table=table)
        return Source(join(self.location, table))

    def column_names(self, sink: SinkInstance, conn: Connection) -> dict[str, str]:
        """The source's columns, by lower-case name."""
        if self.database is not None:
            names = conn.execute(
                text(
                    "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE "
                    "TABLE_SCHEMA = :d AND TABLE_NAME = :t ORDER BY ORDINAL_POSITION"
                ),
                {"d": self.database, "t": self.table},
            ).scalars()
            found = {n.lower(): n for n in names}
            if not found:
                raise ConfigError(f"--against {self.location}: no such MySQL table")
            return found
        return {n.lower(): n for n in _schema(self.location, sink.wal.storage).names}


def read_arrow(
    source: Source, storage: Storage, columns: list[str], where: str | None
) -> pa.Table:
    """The ``columns`` of a Delta or Parquet source (with ``where``: its rows that
    hold, in the SQL of delta-rs's engine; a Parquet directory takes none)."""
    try:
        table = delta_table(source.location, storage)
    except TableNotFoundError:
        table = None
    if table is None:
        if where:
            raise ConfigError(
                f"--where needs a Delta or MySQL source; {source.location} is a "
                "Parquet directory"
            )
        fs, path = storage.filesystem(source.location)
        return ds.dataset(path, filesystem=fs, format="parquet").to_table(columns)
    names = ", ".join('"' + c.replace('"', '""') + '"' for c in columns)
    sql = f"SELECT {names} FROM source" + (f" WHERE {where}" if where else "")
    try:
        reader = QueryBuilder().register("source", table).execute(sql)
        found = pa.RecordBatchReader.from_stream(reader).read_all()
    except Exception as e:
        raise ConfigError(f"--against {source.location}: {first_line(e)}") from None
    return found.cast(pa.schema([_without_views(f) for f in found.schema]))


def _without_views(f: pa.Field) -> pa.Field:
    """The engine's string and binary views as the plain types pyarrow's kernels
    all take."""
    if pa.types.is_string_view(f.type):
        return f.with_type(pa.string())
    if pa.types.is_binary_view(f.type):
        return f.with_type(pa.binary())
    return f


def _schema(location: str, storage: Storage) -> pa.Schema:
    try:
        return pa.schema(delta_table(location, storage).schema().to_arrow())
    except TableNotFoundError:
        pass
    try:
        fs, path = storage.filesystem(location)
        return ds.dataset(path, filesystem=fs, format="parquet").schema
    except (OSError, pa.ArrowInvalid) as e:
        raise ConfigError(
            f"--against {location}: neither a Delta table nor a Parquet directory "
            f"({first_line(e)})"
        ) from None
