"""The quarantine as an operator sees it: each entry with what it is (a row a retry
can apply, or a record that cannot be applied as it is) and where it stands (open,
retried, failed again), from the quarantine table (delta-rs) and the retry table
(MySQL).

An entry is open until a retry applied it: it has no retry row, or one saying it
failed again (counting them: quarantine_counts.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from wal_sink.config import Config
from wal_sink.mysql.retry_state import FAILED, RETRIED, RetryState
from wal_sink.mysql.row_screen import record_is_partial
from wal_sink.protocol.sink_instance import SinkInstance
from wal_sink.wal.quarantine import StoredEntry

OPEN = "open"
ROW = "row"
"""A row a retry applies."""
RAW_TEXT = "raw_text"
"""A record Spark could not parse: raw text, no row."""
PARTIAL_ROW = "partial_row"
"""A row whose record holds less than the row (values cut, bytes shown in hex)."""
ROW_WITHOUT_OP = "row_without_op"
"""A CDC row set aside before 0.4 without its op column: delete or upsert unknown."""
SUPERSEDED = "superseded"
"""A row of a batch applied again since (``replay --force``), which applied it, or
set it aside anew, itself: retrying this entry too would apply it twice."""
WHY_NOT = {
    RAW_TEXT: "raw text Spark could not parse: no row to apply; `wal-sink "
    "quarantine export` writes it for fixing and landing again",
    PARTIAL_ROW: "its record holds less than the row (values cut, or bytes shown in "
    "hex); the whole row is in the WAL until its batch is purged (`wal-sink "
    "inspect N`)",
    ROW_WITHOUT_OP: "set aside without its op column (wal_sink 0.3 or earlier), so "
    "whether it deletes is unknown; `wal-sink quarantine export` writes it",
    SUPERSEDED: "its batch was applied again since (`replay --force`), which "
    "applied the row or set it aside anew: retrying it would apply it twice",
}
"""Why an entry of each kind but ROW is not retried."""


@dataclass(frozen=True)
class ListedEntry:
    entry: StoredEntry
    kind: str
    """ROW, RAW_TEXT, PARTIAL_ROW or ROW_WITHOUT_OP."""
    retry: RetryState | None
    """What a retry recorded of it, if any."""
    table: str = ""
    """The target table it was meant for (by its route, with several tables);
    ``""`` when its route names none."""

    @property
    def state(self) -> str:
        """OPEN, RETRIED or FAILED (failed again: still open)."""
        return OPEN if self.retry is None else self.retry.state

    @property
    def is_open(self) -> bool:
        return self.state != RETRIED

    @property
    def reason(self) -> str:
        """Why it is set aside now: the new reason of a failed retry, or the first."""
        if self.retry is not None and self.retry.state == FAILED:
            return self.retry.reason or self.entry.reason
        return self.entry.reason

    @property
    def when(self) -> datetime:
        """When it was set aside, or last retried."""
        return self.retry.at if self.retry is not None else self.entry.recorded_at

    def to_json(self) -> dict[str, Any]:
        e = self.entry
        return {
            "entry_id": e.entry_id,
            "batch_id": e.batch_id,
            "kind": self.kind,
            "state": self.state,
            "reason": self.reason,
            "first_reason": e.reason,
            "recorded_at": e.recorded_at.isoformat(),
            "retried_at": self.retry.at.isoformat() if self.retry else None,
            "apply_id": e.apply_id,
            "table": self.table,
            "record": json.loads(e.record),
        }


def kind_of(
    entry: StoredEntry,
    config: Config,
    acked_by: dict[int, str | None],
    superseded: set[tuple[str, int]],
) -> str:
    """What the entry is; ``acked_by`` maps batches to the apply their ack row
    names (a batch whose ack row was purged is not in it), ``superseded`` holds
    the applies a forced replay replaced (their marker rows outlive the ack)."""
    if entry.from_parse_errors:
        return RAW_TEXT
    applied_by = acked_by.get(entry.batch_id)
    if entry.apply_id is not None and (
        (entry.apply_id, entry.batch_id) in superseded
        or applied_by not in (None, entry.apply_id)
    ):
        return SUPERSEDED
    if record_is_partial(entry.reason):
        return PARTIAL_ROW
    if config.cdc is not None and config.cdc.op_column not in json.loads(entry.record):
        return ROW_WITHOUT_OP
    return ROW


def table_of(entry: StoredEntry, config: Config) -> str:
    """The table an entry was meant for: the single table, or the one its
    record's route names (``""``: none, or raw text without a record)."""
    mysql = config.mysql
    if not mysql.route_column:
        return mysql.target.table
    if entry.from_parse_errors:
        return ""
    route = json.loads(entry.record).get(mysql.route_column)
    return next((t.table for t in mysql.targets if t.route == route), "")


def list_entries(
    sink: SinkInstance,
    *,
    batch_id: int | None = None,
    reason: str | None = None,
    table: str | None = None,
) -> list[ListedEntry]:
    """The sink's entries (of one batch, whose reason holds ``reason`` in any case,
    of one ``table``) in batch order, then in the order they were set aside, with
    their retry rows (a plain read: for showing and planning, not for
    deciding)."""
    entries = sink.quarantine.entries(batch_id)
    with sink.engine.connect() as conn:
        found = sink.retries.of(conn, [e.entry_id for e in entries])
        batches = [e.batch_id for e in entries if e.apply_id is not None]
        acked_by = (
            sink.acks.apply_ids(conn, min(batches), max(batches)) if batches else {}
        )
        superseded = sink.retries.superseded(
            conn, ((e.apply_id, e.batch_id) for e in entries if e.apply_id is not None)
        )
    listed = [
        ListedEntry(
            e,
            kind_of(e, sink.config, acked_by, superseded),
            found.get(e.entry_id),
            table_of(e, sink.config),
        )
        for e in entries
    ]
    if table is not None:
        listed = [e for e in listed if e.table == table]
    if reason is not None:
        wanted = reason.casefold()
        listed = [
            e
            for e in listed
            if wanted in e.entry.reason.casefold() or wanted in e.reason.casefold()
        ]
    return listed
