"""Rows set aside instead of applied: a Delta table beside the WAL
(``wal.quarantine_path``, default ``<wal.path>_quarantine``) with sink id, batch
id, reason and the record.

Entries of a batch are written before that batch's MySQL COMMIT, so they are never
lost, and with Delta's app-transaction id (sink id, batch id), so a retried or
replayed batch does not record them twice. Written with delta-rs, like the WAL.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import date, datetime, timezone
from decimal import Decimal
from typing import Any

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import TableNotFoundError

from wal_sink.storage import Storage
from wal_sink.wal import open_parquet

SCHEMA = pa.schema(
    [
        ("sink_id", pa.string()),
        ("batch_id", pa.int64()),
        ("reason", pa.string()),
        ("record", pa.string()),
        ("recorded_at", pa.timestamp("us", tz="UTC")),
    ]
)


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
    """Entries of one sink; ``stream`` names a second writer of the same sink (the
    parse-error stream), whose batch ids are its own: each gets its own Delta app id
    (``sink_id:stream``; ':' cannot occur in a sink id)."""

    def __init__(
        self,
        path: str,
        sink_id: str,
        stream: str | None = None,
        storage: Storage = Storage(),
    ) -> None:
        self.path = path
        self.sink_id = sink_id
        self.app_id = f"{sink_id}:{stream}" if stream else sink_id
        self.storage = storage

    def _table(self) -> DeltaTable | None:
        try:
            return DeltaTable(
                self.path, storage_options=self.storage.delta_options or None
            )
        except TableNotFoundError:
            return None

    def recorded_version(self) -> int | None:
        """Highest batch id this writer recorded entries for, if any."""
        table = self._table()
        return table.transaction_version(self.app_id) if table is not None else None

    def record(self, batch_id: int, entries: list[Entry]) -> None:
        """Append the batch's entries unless this batch already recorded some."""
        if not entries:
            return
        recorded = self.recorded_version()
        if recorded is not None and recorded >= batch_id:
            return
        now = datetime.now(timezone.utc)
        data = pa.table(
            {
                "sink_id": [self.sink_id] * len(entries),
                "batch_id": [batch_id] * len(entries),
                "reason": [e.reason for e in entries],
                "record": [record_json(e.record) for e in entries],
                "recorded_at": [now] * len(entries),
            },
            schema=SCHEMA,
        )
        write_deltalake(
            self.path,
            data,
            mode="append",
            storage_options=self.storage.delta_options or None,
            commit_properties=CommitProperties(
                app_transactions=[Transaction(app_id=self.app_id, version=batch_id)]
            ),
        )

    def read(self, limit: int, batch_id: int | None = None) -> list[dict[str, Any]]:
        """Newest-last entries of this sink (optionally of one batch), at most
        ``limit``."""
        table = self._table()
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
                        rows.append(row)
        rows.sort(key=lambda r: (r["batch_id"], r["recorded_at"]))
        return rows[-limit:]
