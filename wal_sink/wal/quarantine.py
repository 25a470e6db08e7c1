"""Rows set aside instead of applied: a Delta table beside the WAL
(``wal.quarantine_path``, default ``<wal.path>_quarantine``) with sink id, batch
id, the apply that set them aside, reason, the record and the entry's identity.
Written with delta-rs, by the one sink that owns it (ownership.py).

Two writers, each exactly once through a Delta application transaction of its own:
the committer's rows arrive through the MySQL outbox (outbox.py), so they are the
rows of applies that committed, once; the parse-error stream records a Spark batch's
unparseable records under ``<sink id>:parse`` with the batch id as version.

Each entry has a stable id (``entry_id``), unique within the sink, that a retry
records in MySQL: ``<apply id>/<outbox row id>`` for the committer's entries,
``parse/<batch>/<index>`` for the parse-error stream's. Entries written before
entry ids existed get one from their stored fields (``legacy/<hash>/<n>``, n
telling identical entries apart); the table gains the new columns on its next
write (``schema_mode="merge"``), old rows reading them as null.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import date, datetime, time, timezone
from decimal import Decimal
from typing import Any

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import CommitFailedError

from wal_sink.errors import TransientError
from wal_sink.storage import Storage
from wal_sink.wal.format import open_parquet, table_exists
from wal_sink.wal.ownership import QUARANTINE, open_owned, owned_configuration
from wal_sink.wal.storage_errors import storage_error

SCHEMA = pa.schema(
    [
        ("sink_id", pa.string()),
        ("batch_id", pa.int64()),
        ("reason", pa.string()),
        ("record", pa.string()),
        ("recorded_at", pa.timestamp("us", tz="UTC")),
        ("apply_id", pa.string()),
        ("entry_id", pa.string()),
        ("entry_seq", pa.int64()),
    ]
)
COMMIT_ATTEMPTS = 10
PARSE_ENTRY = "parse"
"""The first part of the ids of the parse-error stream's entries."""
LEGACY_ENTRY = "legacy"
"""The first part of the ids given to entries written without one."""


@dataclass(frozen=True)
class Entry:
    record: dict[str, Any]
    reason: str


@dataclass(frozen=True)
class StoredEntry:
    """An entry as the quarantine table holds it."""

    entry_id: str
    batch_id: int
    """The sink's batch; for the parse-error stream's entries, that query's batch."""
    reason: str
    record: str
    """The record as JSON text (``record_json``)."""
    recorded_at: datetime
    apply_id: str | None
    seq: int | None
    """Order of the entries of one apply (the outbox row id) or of one parse-error
    batch; None for entries written without an id."""

    @property
    def from_parse_errors(self) -> bool:
        """Raw text the parse-error stream set aside: no row to apply."""
        if self.entry_id.startswith(f"{PARSE_ENTRY}/"):
            return True
        return (
            self.entry_id.startswith(f"{LEGACY_ENTRY}/")
            and self.apply_id is None
            and self.reason.startswith("could not parse as ")
            and list(json.loads(self.record)) == ["raw"]
        )


def record_json(record: dict[str, Any]) -> str:
    """The record as JSON text; decimals and times kept exact as strings."""

    def default(value: Any) -> str:
        if isinstance(value, (Decimal, datetime, date)):
            return str(value)
        if isinstance(value, time):
            return value.isoformat()
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
        return open_owned(self.path, self.storage, self.sink_id, QUARANTINE)

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
        except Exception:
            if not table_exists(self.path, self.storage):
                raise

    def record(self, app_id: str, batch_id: int, entries: list[Entry]) -> None:
        """The parse-error stream's entries of its batch ``batch_id``, once (their
        ids: ``parse/<batch>/<index>`` for the app id ``<sink id>:parse``)."""
        if entries:
            now = datetime.now(timezone.utc)
            role = app_id.rsplit(":", 1)[-1]
            rows = [
                {
                    "sink_id": self.sink_id,
                    "batch_id": batch_id,
                    "reason": e.reason,
                    "record": record_json(e.record),
                    "recorded_at": now,
                    "apply_id": None,
                    "entry_id": f"{role}/{batch_id}/{i}",
                    "entry_seq": i,
                }
                for i, e in enumerate(entries)
            ]
            self.append(rows, app_id, batch_id)

    def entries(self, batch_id: int | None = None) -> list[StoredEntry]:
        """This sink's entries (optionally of one batch) in batch order, then in the
        order they were set aside."""
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
                        rows.append(row)
        found = _with_ids(rows)
        found.sort(key=lambda e: (e.batch_id, e.recorded_at, e.seq or 0, e.entry_id))
        return found

    def read(self, limit: int, batch_id: int | None = None) -> list[dict[str, Any]]:
        """Newest-last entries of this sink (optionally of one batch), at most
        ``limit``, as dicts of the table's columns."""
        return [
            {
                "sink_id": self.sink_id,
                "batch_id": e.batch_id,
                "reason": e.reason,
                "record": e.record,
                "recorded_at": e.recorded_at,
                "apply_id": e.apply_id,
                "entry_id": e.entry_id,
                "entry_seq": e.seq,
            }
            for e in self.entries(batch_id)[-limit:]
        ]

    def count(self) -> int:
        """How many entries this sink has, from the Delta log's file statistics
        (cheap: no data file is read). Only a table written before owners, which
        may hold other sinks' rows, or files without statistics, have their
        ``sink_id`` column read."""
        table = self.table()
        if table is None:
            return 0
        actions = pa.table(table.get_add_actions(flatten=True)).to_pylist()
        if all(
            a.get("num_records") is not None
            and a.get("min.sink_id") == a.get("max.sink_id") == self.sink_id
            for a in actions
        ):
            return sum(int(a["num_records"]) for a in actions)
        return sum(self._count_in(uri) for uri in table.file_uris())

    def holding(self, entry_ids: set[str]) -> set[str]:
        """Which of ``entry_ids`` the table holds (reads its ``entry_id`` column:
        for the rare drain that cannot tell from the app transaction alone)."""
        table = self.table()
        if table is None or not entry_ids:
            return set()
        found: set[str] = set()
        for uri in table.file_uris():
            parquet = open_parquet(uri, self.storage)
            if "entry_id" not in parquet.schema_arrow.names:
                continue  # a file of 0.3, before entry ids
            for chunk in parquet.iter_batches(batch_size=10_000, columns=["entry_id"]):
                found |= entry_ids.intersection(chunk.column(0).to_pylist())
        return found

    def _count_in(self, uri: str) -> int:
        count = 0
        parquet = open_parquet(uri, self.storage)
        for chunk in parquet.iter_batches(batch_size=10_000, columns=["sink_id"]):
            count += chunk.column(0).to_pylist().count(self.sink_id)
        return count

    def delete(self, predicate: str) -> None:
        """Remove the entries ``predicate`` selects (a delta-rs predicate over this
        table's columns), retrying commits that meet another writer's."""
        for _ in range(COMMIT_ATTEMPTS):
            table = self.table()
            if table is None:
                return
            try:
                table.delete(f"sink_id = '{self.sink_id}' AND ({predicate})")
                return
            except CommitFailedError:
                continue
            except Exception as e:
                raise storage_error(e, self.path, sink_id=self.sink_id) from e
        raise TransientError(
            f"could not commit to {self.path} after {COMMIT_ATTEMPTS} conflicts",
            sink_id=self.sink_id,
        )


def _with_ids(rows: list[dict[str, Any]]) -> list[StoredEntry]:
    """The rows as entries; one without an id gets ``legacy/<hash>/<n>``, the hash
    of its stored fields and n counting identical ones."""
    seen: dict[str, int] = {}
    found = []
    for row in sorted(rows, key=lambda r: r.get("entry_id") or ""):
        entry_id = row.get("entry_id")
        if entry_id is None:
            fields = json.dumps(
                [
                    row["batch_id"],
                    row.get("apply_id"),
                    row["reason"],
                    row["record"],
                    row["recorded_at"].isoformat(),
                ]
            )
            digest = hashlib.sha256(fields.encode()).hexdigest()[:32]
            n = seen[digest] = seen.get(digest, -1) + 1
            entry_id = f"{LEGACY_ENTRY}/{digest}/{n}"
        found.append(
            StoredEntry(
                entry_id=entry_id,
                batch_id=row["batch_id"],
                reason=row["reason"],
                record=row["record"],
                recorded_at=row["recorded_at"],
                apply_id=row.get("apply_id"),
                seq=row.get("entry_seq"),
            )
        )
    return found
