"""A batch set aside whole (``wal-sink quarantine-batch N``): every row of it into
the quarantine outbox, inside the transaction that acks it as quarantined
(committer.py), none into the target."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
from sqlalchemy import Connection

from wal_sink.mysql.row_screen import CUT, RECORD_CUT, row_record
from wal_sink.protocol.outbox import Outbox
from wal_sink.wal.quarantine import Entry, record_json

WHOLE_RECORD_BYTES = 512_000
"""A record longer than this is cut: its outbox row has to fit in a statement the
server takes (preflight holds max_allowed_packet to at least 1 MiB), or the
set-aside would fail at every attempt."""


def put_whole_batch(
    conn: Connection,
    outbox: Outbox,
    chunks: Iterator[pa.RecordBatch],
    batch_id: int,
    apply_id: str,
) -> int:
    """Every row of ``chunks`` (the batch's, in staged order) into ``outbox``,
    chunk by chunk; returns how many."""
    reason = f"set aside whole by wal-sink quarantine-batch {batch_id}; not applied"
    put = 0
    for chunk in chunks:
        entries = [_whole(chunk, i, reason) for i in range(chunk.num_rows)]
        outbox.put(conn, apply_id, batch_id, entries)
        put += len(entries)
    return put


def _whole(chunk: pa.RecordBatch, index: int, reason: str) -> Entry:
    """Row ``index`` of a batch set aside whole, as its quarantine entry."""
    record = row_record(chunk, index)
    size = len(record_json(record).encode())
    if size <= WHOLE_RECORD_BYTES:
        return Entry(record, reason)
    return Entry(
        row_record(chunk, index, RECORD_CUT),
        f"{reason}; the record would take {size} bytes: {CUT}, and the whole row "
        "stays in the WAL until its batch is purged (wal-sink inspect)",
    )
