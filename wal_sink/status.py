"""What an operator needs to see about one sink, from the WAL (delta-rs) and the ack
and lease tables (SQL) — no JVM, so ``wal-sink status`` answers in well under a
second."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import Engine, Table, func, select
from sqlalchemy.exc import ProgrammingError

from wal_sink.mysql_errors import error_code
from wal_sink.recovery import acked_batch_ids
from wal_sink.wal import WalReader

NO_SUCH_TABLE = 1146


@dataclass(frozen=True)
class SinkStatus:
    sink_id: str
    wal_path: str
    wal_exists: bool
    staged_batches: int
    staged_first: int | None
    staged_last: int | None
    last_staged_txn: int | None
    """Highest batch id ever staged (survives purge)."""
    wal_rows: int
    wal_bytes: int
    wal_files: int
    ack_tables_exist: bool
    acked_batches: int
    acked_first: int | None
    acked_last: int | None
    unacked: list[int] = field(default_factory=list)
    """Staged batches without an ack row: what recover would apply."""
    rows_applied: int = 0
    rows_deleted: int = 0
    rows_quarantined: int = 0
    last_commit_at: str | None = None
    lag_seconds: float | None = None
    """Seconds since the last batch was committed to MySQL."""
    lag_batches: int | None = None
    """Batches staged beyond the last acked one."""
    lease_epoch: int | None = None
    lease_holder: str | None = None
    lease_acquired_at: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def collect_status(
    engine: Engine, ack: Table, lease: Table, wal: WalReader, sink_id: str
) -> SinkStatus:
    staged = wal.staged_batches()
    last_staged = wal.last_staged(sink_id)
    try:
        acks, acked_ids, lease_row = _mysql_side(engine, ack, lease, sink_id)
        tables = True
    except ProgrammingError as e:
        if error_code(e) != NO_SUCH_TABLE:
            raise
        acks, acked_ids, lease_row, tables = None, set(), None, False
    count, first, last, rows, deleted, quarantined, last_at = acks or (0,) + (None,) * 6
    now = datetime.now(timezone.utc).replace(tzinfo=None)
    return SinkStatus(
        sink_id=sink_id,
        wal_path=wal.path,
        wal_exists=wal.table() is not None,
        staged_batches=len(staged),
        staged_first=min(staged, default=None),
        staged_last=max(staged, default=None),
        last_staged_txn=last_staged,
        wal_rows=sum(b.rows for b in staged.values()),
        wal_bytes=sum(b.size_bytes for b in staged.values()),
        wal_files=sum(len(b.files) for b in staged.values()),
        ack_tables_exist=tables,
        acked_batches=count or 0,
        acked_first=first,
        acked_last=last,
        unacked=sorted(b for b in staged if b not in acked_ids),
        rows_applied=int(rows or 0),
        rows_deleted=int(deleted or 0),
        rows_quarantined=int(quarantined or 0),
        last_commit_at=last_at.isoformat() if last_at else None,
        lag_seconds=round((now - last_at).total_seconds(), 3) if last_at else None,
        lag_batches=(last_staged - (last if last is not None else -1))
        if last_staged is not None
        else None,
        lease_epoch=lease_row[0] if lease_row else None,
        lease_holder=lease_row[1] if lease_row else None,
        lease_acquired_at=lease_row[2].isoformat() if lease_row else None,
    )


def _mysql_side(engine: Engine, ack: Table, lease: Table, sink_id: str):
    mine = ack.c.sink_id == sink_id
    with engine.connect() as conn:
        acks = conn.execute(
            select(
                func.count(),
                func.min(ack.c.batch_id),
                func.max(ack.c.batch_id),
                func.sum(ack.c.row_count),
                func.sum(ack.c.deleted_count),
                func.sum(ack.c.quarantined),
                func.max(ack.c.committed_at),
            ).where(mine)
        ).one()
        lease_row = conn.execute(
            select(lease.c.epoch, lease.c.holder, lease.c.acquired_at).where(
                lease.c.sink_id == sink_id
            )
        ).first()
    return tuple(acks), acked_batch_ids(engine, ack, sink_id), lease_row
