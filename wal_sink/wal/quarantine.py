"""Rows set aside instead of applied: a Delta table beside the WAL
(``wal.quarantine_path``, default ``<wal.path>_quarantine``) with sink id, batch
id, the apply that set them aside, reason and the record. Written with delta-rs,
by the one sink that owns it (ownership.py).

Two writers, each exactly once through a Delta application transaction of its own:
the committer's rows arrive through the MySQL outbox (outbox.py), so they are the
rows of applies that committed, once; the parse-error stream records a Spark batch's
unparseable records under ``<sink id>:parse`` with the batch id as version.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import date, datetime, timezone
from decimal import Decimal
from typing import Any

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import CommitFailedError, TableNotFoundError

from wal_sink.errors import TransientError
from wal_sink.storage import Storage
from wal_sink.wal.ownership import QUARANTINE, check_owner, owned_configuration
from wal_sink.wal.reader import delta_table, open_parquet
from wal_sink.wal.storage_errors import storage_error

SCHEMA = pa.schema(
    [
        ("sink_id", pa.string()),
        ("batch_id", pa.int64()),
        ("reason", pa.string()),
        ("record", pa.string()),
        ("recorded_at", pa.timestamp("us", tz="UTC")),
        ("apply_id", pa.string()),
    ]
)
COMMIT_ATTEMPTS = 10


@dataclass(frozen=True)
class Entry:
    record: dict[str, Any]
    reason: str


def record_json(record: dict[str, Any]) -> str:
    """The record as JSON text; decimals and times kept exact as strings."""

    def default(value: Any) -> str:
        if isinstance(value, (Decimal, datetime, date)):
            return str(value)
        if isinstance(value, bytes):
            return value.hex()
        return repr(value)

    return json.dumps(record, default=default, sort_keys=True)


class Quarantine:
    """The quarantine entries of one sink, in a table it owns: one another sink
    owns is refused (ConfigError, I9)."""

    def __init__(self, path: str, sink_id: str, storage: Storage = Storage()) -> None:
        self.path = path
        self.sink_id = sink_id
        self.storage = storage

    def table(self) -> DeltaTable | None:
        """The table, or None while nothing was ever set aside."""
        try:
            table = delta_table(self.path, self.storage)
        except TableNotFoundError:
            return None
        except Exception as e:
            raise storage_error(e, self.path, sink_id=self.sink_id) from e
        check_owner(table, self.sink_id, self.path, QUARANTINE)
        return table

    def version(self, app_id: str) -> int | None:
        """The highest version ``app_id`` wrote, if any."""
        table = self.table()
        return table.transaction_version(app_id) if table is not None else None

    def append(self, rows: list[dict[str, Any]], app_id: str, version: int) -> bool:
        """Append ``rows`` (columns of ``SCHEMA``) in one commit carrying the app
        transaction (``app_id``, ``version``), unless the table already records
        that version or a later one. Returns whether this call wrote them."""
        data = pa.Table.from_pylist(rows, schema=SCHEMA)
        for _ in range(COMMIT_ATTEMPTS):
            table = self.table()
            if table is None:
                self._create()
                continue
            recorded = table.transaction_version(app_id)
            if recorded is not None and recorded >= version:
                return False
            try:
                write_deltalake(
                    self.path,
                    data,
                    mode="append",
                    schema_mode="merge",  # tables of 0.1 lack apply_id
                    storage_options=self.storage.delta_options or None,
                    commit_properties=CommitProperties(
                        app_transactions=[Transaction(app_id=app_id, version=version)]
                    ),
                )
                return True
            except CommitFailedError:
                continue
        raise TransientError(
            f"could not commit to {self.path} after {COMMIT_ATTEMPTS} conflicts",
            sink_id=self.sink_id,
        )

    def _create(self) -> None:
        """Create the table, owned by this sink (a writer that meets another's
        creation then finds that table)."""
        try:
            DeltaTable.create(
                self.path,
                SCHEMA,
                mode="error",
                configuration=owned_configuration(self.sink_id),
                storage_options=self.storage.delta_options or None,
                raise_if_key_not_exists=False,
            )
        except (CommitFailedError, FileExistsError):
            pass
        except Exception as e:
            if "already exists" not in str(e):
                raise

    def record(self, app_id: str, batch_id: int, entries: list[Entry]) -> None:
        """The parse-error stream's entries of its batch ``batch_id``, once."""
        if entries:
            now = datetime.now(timezone.utc)
            rows = [
                {
                    "sink_id": self.sink_id,
                    "batch_id": batch_id,
                    "reason": e.reason,
                    "record": record_json(e.record),
                    "recorded_at": now,
                    "apply_id": None,
                }
                for e in entries
            ]
            self.append(rows, app_id, batch_id)

    def read(self, limit: int, batch_id: int | None = None) -> list[dict[str, Any]]:
        """Newest-last entries of this sink (optionally of one batch), at most
        ``limit``."""
        table = self.table()
        if table is None:
            return []
        rows: list[dict[str, Any]] = []
        for uri in table.file_uris():
            for chunk in open_parquet(uri, self.storage).iter_batches(batch_size=1000):
                for row in chunk.to_pylist():
                    if row["sink_id"] == self.sink_id and batch_id in (
                        None,
                        row["batch_id"],
                    ):
                        rows.append({"apply_id": None, **row})
        rows.sort(key=lambda r: (r["batch_id"], r["recorded_at"]))
        return rows[-limit:]
