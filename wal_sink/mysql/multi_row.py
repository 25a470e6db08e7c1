"""The row path's upsert with its VALUES list rendered in Arrow: the same
``INSERT … VALUES (…),(…) ON DUPLICATE KEY UPDATE`` statement that PyMySQL's
executemany would build, without rendering every value in Python first.

A chunk it cannot render exactly (a type without a text form here, NaN or infinity)
is left to the row-by-row path; a chunk MySQL rejects goes back to the caller,
which isolates the rejected rows value by value.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
from sqlalchemy import Connection, literal_column
from sqlalchemy.dialects.mysql import Insert

from wal_sink.mysql.arrow_text import finite, renderable, sql_rows
from wal_sink.mysql.server_clock import clock_defaults

# As PyMySQL's executemany: statements of about 1 MB, well under max_allowed_packet.
MAX_STATEMENT_BYTES = 1_024_000


class MultiRowUpsert:
    def __init__(
        self, conn: Connection, upsert: Insert, columns: Sequence[str]
    ) -> None:
        # SQLAlchemy renders the statement with a marker for each value, so the
        # VALUES row is known without parsing SQL: what stands before it and after
        # it is the statement's prefix and postfix. ``inline``: a key given as an
        # SQL expression would otherwise have the key fetched back with RETURNING
        # (MariaDB 10.5+): every upserted key sent back to the committer.
        # Columns the upsert fills with the server's time (server_clock.py) are
        # marked too, and rendered as that SQL in every row.
        clock = {
            c: str(e.compile(dialect=conn.dialect))
            for c, e in clock_defaults(upsert.table, columns).items()
        }
        marks = {c: f"__wal_sink_value_{i}__" for i, c in enumerate([*columns, *clock])}
        values = {c: literal_column(m) for c, m in marks.items()}
        statement = upsert.values(values).inline()
        sql = str(statement.compile(dialect=conn.dialect))
        order = sorted(marks, key=lambda c: sql.find(marks[c]))
        prefix, values, postfix = sql.partition(
            "(" + ", ".join(marks[c] for c in order) + ")"
        )
        if not values or "__wal_sink_value_" in postfix:
            raise ValueError("not a multi-row INSERT this path can build")
        self.row = order  # the statement's column order
        self.columns = [c for c in order if c not in clock]  # the chunk's
        self.clock = clock
        # Sent without parameters: a '%' of a column name, which SQLAlchemy doubles
        # for the driver's formatting, is undoubled here as the driver would; a
        # placeholder outside VALUES (none is expected) leaves it to the driver.
        try:
            self.prefix, self.postfix = prefix % (), postfix % ()
        except (TypeError, ValueError, KeyError) as e:
            raise ValueError("not a multi-row INSERT this path can build") from e

    @classmethod
    def for_schema(
        cls, conn: Connection, upsert: Insert, columns: Sequence[str], schema: pa.Schema
    ) -> MultiRowUpsert | None:
        """The fast statement for these columns, or None: row by row instead."""
        if not renderable(schema):
            return None
        try:
            return cls(conn, upsert, columns)
        except ValueError:
            return None

    def renders(self, chunk: pa.RecordBatch) -> bool:
        return chunk.num_rows > 0 and finite(chunk, self.columns)

    def render(self, chunk: pa.RecordBatch) -> list[str]:
        """The statements that upsert ``chunk``, in staged order. Needs no
        connection: the committer renders the next chunk on a thread of its own
        while MySQL runs the current one's, and hands them to ``apply``."""
        return [
            self.prefix + values + self.postfix
            for values in sql_rows(chunk, self.row, MAX_STATEMENT_BYTES, self.clock)
        ]

    def apply(
        self,
        conn: Connection,
        chunk: pa.RecordBatch,
        statements: list[str] | None = None,
    ) -> int:
        """Upsert ``chunk`` in staged order, sending ``statements`` when it was
        rendered already; raise the DBAPIError MySQL gives."""
        for statement in self.render(chunk) if statements is None else statements:
            # no parameters: the driver leaves the % signs in values alone
            conn.exec_driver_sql(statement, execution_options={"no_parameters": True})
        return chunk.num_rows
