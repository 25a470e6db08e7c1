"""What an operator needs to see about one sink, from the WAL and the quarantine
table's logs (delta-rs) and the ack, lease, outbox and retry tables (SQL) — no JVM,
no scan of every ack ever written nor of the quarantine's data files, so
``wal-sink status`` answers in well under a second."""

from __future__ import annotations

import time
from dataclasses import asdict, astuple, dataclass, field
from typing import Any

from sqlalchemy import Connection, select, text
from sqlalchemy.exc import ProgrammingError

from wal_sink.durations import utc_now
from wal_sink.mysql.acks import AckSummary, TableCounts
from wal_sink.mysql.errors import error_code
from wal_sink.mysql.history import events_table
from wal_sink.mysql.retry_state import RetryCounts
from wal_sink.mysql.tombstones import Tombstones
from wal_sink.ops.verify_repair import RepairCounts, Repairs
from wal_sink.protocol.quarantine_counts import QuarantineCounts
from wal_sink.protocol.recovery import unacked_batches
from wal_sink.protocol.sink_instance import SinkInstance

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
    """Ack rows kept (purge drops those of purged batches but the newest)."""
    acked_first: int | None
    acked_last: int | None
    unacked: list[int] = field(default_factory=list)
    """Staged batches without an ack row: what the committer or recover applies."""
    pending_batches: int = 0
    """How many batches are staged and not yet applied (len(unacked))."""
    commit_lag_seconds: float | None = None
    """How long the oldest staged-but-unapplied batch has waited for MySQL."""
    rows_applied: int = 0
    rows_deleted: int = 0
    rows_quarantined: int = 0
    quarantined_batches: list[int] = field(default_factory=list)
    """Batches set aside whole (``wal-sink quarantine-batch``): acked as
    quarantined, never applied."""
    rows_skipped: int = 0
    """CDC upserts a newer delete made stale (not applied, not bad data)."""
    tombstones: int | None = None
    """Deletes remembered against older upserts ([cdc] with a version column)."""
    outbox_rows: int = 0
    """Rows set aside by committed batches, not yet in the quarantine table."""
    quarantine_entries: int = 0
    """Entries in the quarantine table."""
    quarantine_open: int = 0
    """Entries no retry applied yet (failed again included)."""
    quarantine_retried: int = 0
    """Entries a retry applied (resolved)."""
    quarantine_failed: int = 0
    """Open entries a retry tried and saw refused again."""
    last_commit_at: str | None = None
    lag_seconds: float | None = None
    """Seconds since the last batch was committed to MySQL."""
    lag_batches: int | None = None
    """Batches staged beyond the last acked one."""
    lease_epoch: int | None = None
    lease_holder: str | None = None
    lease_acquired_at: str | None = None
    repairs_applied: int = 0
    """Repairs (``verify --against --repair``) applied with their ack."""
    repairs_pending: list[int] = field(default_factory=list)
    """Repairs staged and not applied (stopped half-way): the next repair applies
    them first."""
    tables: dict[str, dict[str, int | None]] = field(default_factory=dict)
    """Per target table (always one at least): rows applied, deleted, set aside,
    skipped, tombstones, and for a history about how many events it keeps; with
    several tables ``""`` counts the rows whose route named none."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def collect_status(sink: SinkInstance) -> SinkStatus:
    wal = sink.wal
    wal.refresh()
    staged = wal.staged_batches()
    last_staged = wal.last_staged(sink.sink_id)
    lease = sink.tables.lease
    try:
        with sink.engine.connect() as conn:
            acks = sink.acks.summary(conn)
            set_aside = sink.acks.set_aside(conn)
            unacked = unacked_batches(wal, sink.acks, conn, staged)
            outbox = sink.parts.outbox.waiting(conn)
            lease_row = conn.execute(
                select(lease.c.epoch, lease.c.holder, lease.c.acquired_at).where(
                    lease.c.sink_id == sink.sink_id
                )
            ).first()
            kept = _tombstones(sink, conn)
            events = _history_events(sink, conn)
            by_table = sink.acks.table_counts(conn)
            retries = sink.retries.counts(conn)
            repairs = Repairs(sink, writing=False).counts(conn)
        tables = True
    except ProgrammingError as e:
        if error_code(e) != NO_SUCH_TABLE:
            raise
        acks, unacked, outbox, lease_row, tables = None, sorted(staged), 0, None, False
        set_aside = []
        kept, by_table, events = {}, {}, {}
        retries = RetryCounts(0, 0)
        repairs = RepairCounts(0, [])
    quarantine = QuarantineCounts(sink.quarantine.count(), *astuple(retries))
    now = utc_now()
    last_at = acks.last_commit_at if acks else None
    last = acks.last if acks else None
    waited = [
        staged[b].staged_ms for b in unacked if b in staged and staged[b].staged_ms
    ]
    return SinkStatus(
        sink_id=sink.sink_id,
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
        acked_batches=acks.count if acks else 0,
        acked_first=acks.first if acks else None,
        acked_last=last,
        unacked=unacked,
        pending_batches=len(unacked),
        commit_lag_seconds=round(max(0.0, time.time() - min(waited) / 1000), 3)
        if waited
        else (0.0 if tables else None),
        rows_applied=acks.rows if acks else 0,
        rows_deleted=acks.deleted if acks else 0,
        rows_quarantined=acks.quarantined if acks else 0,
        quarantined_batches=set_aside,
        rows_skipped=acks.skipped if acks else 0,
        tombstones=sum(kept.values()) if kept else None,
        outbox_rows=outbox,
        quarantine_entries=quarantine.entries,
        quarantine_open=quarantine.open,
        quarantine_retried=quarantine.retried,
        quarantine_failed=quarantine.failed,
        last_commit_at=last_at.isoformat() if last_at else None,
        lag_seconds=round((now - last_at).total_seconds(), 3) if last_at else None,
        lag_batches=(last_staged - (last if last is not None else -1))
        if last_staged is not None
        else None,
        lease_epoch=lease_row[0] if lease_row else None,
        lease_holder=lease_row[1] if lease_row else None,
        lease_acquired_at=lease_row[2].isoformat() if lease_row else None,
        repairs_applied=repairs.applied,
        repairs_pending=repairs.pending,
        tables=_per_table(sink, acks, by_table, kept, events),
    )


def _per_table(
    sink: SinkInstance,
    acks: AckSummary | None,
    by_table: dict[str, TableCounts],
    kept: dict[str, int],
    events: dict[str, int],
) -> dict[str, dict[str, int | None]]:
    """Each target table's counts: the ack rows' own with one table, the per-table
    counts with several."""
    if not sink.config.mysql.route_column and acks is not None:
        (only,) = sink.config.mysql.targets
        by_table = {
            only.table: TableCounts(
                acks.rows, acks.deleted, acks.skipped, acks.quarantined
            )
        }
    names = [t.table for t in sink.config.mysql.targets]
    names += [n for n in by_table if n not in names]
    return {
        name: {
            "rows_applied": by_table.get(name, TableCounts()).upserted,
            "rows_deleted": by_table.get(name, TableCounts()).deleted,
            "rows_quarantined": by_table.get(name, TableCounts()).set_aside,
            "rows_skipped": by_table.get(name, TableCounts()).skipped,
            "tombstones": kept.get(name),
            "history_events": events.get(name),
        }
        for name in names
    }


def _history_events(sink: SinkInstance, conn: Connection) -> dict[str, int]:
    """About how many events each history (type 2) keeps: the server's estimate
    of its events table's rows (a count would read the whole table)."""
    found = {}
    for target in sink.config.mysql.targets:
        if target.scd_type == 2:
            rows = conn.execute(
                text(
                    "SELECT TABLE_ROWS FROM information_schema.TABLES WHERE "
                    "TABLE_SCHEMA = DATABASE() AND TABLE_NAME = :t"
                ),
                {"t": events_table(target)},
            ).scalar()
            found[target.table] = int(rows or 0)
    return found


def _tombstones(sink: SinkInstance, conn: Connection) -> dict[str, int]:
    """How many tombstones the sink keeps, per table with [cdc] and a version
    column (0 while its tombstone table does not exist yet)."""
    config = sink.config
    return {
        t.table: Tombstones(config, t).count(conn)
        for t in config.mysql.targets
        if config.keeps_tombstones(t)
    }
