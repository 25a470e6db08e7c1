"""Dropping applied batches from the WAL (I5: never one without an ack row), and
then their ack rows, so the ack table does not grow without end.

With ``[cdc]`` and a version column purge also removes the tombstones the sink
recorded longer than ``cdc.tombstone_retention`` ago: an upsert older than such a
delete, arriving after that, would bring the row back, so the retention must outlast
any late delivery. A key with an open quarantined upsert keeps its tombstone until
the entry is retried or purged.

The plan is computed from the ack table; a batch that has an ack can never lose it
before its files are gone, so a plan stays safe while it is carried out. Ack rows
are dropped only after the batches left the WAL (a crash in between leaves acks of
purged batches, which is harmless), and the newest ack row always stays: recovery
and the checkpoint check (I7) start from it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from wal_sink.config import WalConfig
from wal_sink.durations import parse_duration
from wal_sink.errors import ConfigError
from wal_sink.mysql.tombstones import Tombstones
from wal_sink.ops.quarantine_entries import ROW, list_entries
from wal_sink.protocol.sink_instance import SinkInstance
from wal_sink.wal.maintenance import delete_batches


@dataclass(frozen=True)
class PurgePlan:
    remove: tuple[int, ...]
    """Acked batches selected for removal."""
    kept_unacked: tuple[int, ...]
    """Selected by the bound but without an ack row: kept (I5)."""
    rows: int
    bytes: int


def plan_purge(
    sink: SinkInstance, *, before: int | None = None, older_than: float | None = None
) -> PurgePlan:
    """Select staged batches below ``before`` or acked more than ``older_than``
    seconds ago; only acked ones are removed."""
    if (before is None) == (older_than is None):
        raise ValueError("give exactly one of before / older_than")
    sink.wal.refresh()
    staged = sink.wal.staged_batches()
    if not staged:
        return PurgePlan((), (), 0, 0)
    with sink.engine.connect() as conn:
        acks = sink.acks.committed_at(conn, min(staged), max(staged))
    if before is not None:
        selected = [b for b in staged if b < before]
    else:
        cutoff = datetime.now(timezone.utc).replace(tzinfo=None) - timedelta(
            seconds=older_than
        )
        selected = [b for b in staged if b in acks and acks[b] < cutoff]
    remove = tuple(b for b in selected if b in acks)
    return PurgePlan(
        remove=remove,
        kept_unacked=tuple(b for b in selected if b not in acks),
        rows=sum(staged[b].rows for b in remove),
        bytes=sum(staged[b].size_bytes for b in remove),
    )


def execute_purge(sink: SinkInstance, plan: PurgePlan) -> int:
    """Remove the plan's batches from the WAL, then their ack rows; returns how many
    ack rows were dropped."""
    delete_batches(
        sink.wal.path, sink.wal.storage, list(plan.remove), sink_id=sink.sink_id
    )
    with sink.engine.begin() as conn:
        return sink.acks.forget(conn, list(plan.remove))


def check_retention(wal: WalConfig, retain: str, retain_seconds: float) -> None:
    """Refuse a vacuum retention under ``wal.min_vacuum_retention``.

    Executors write a stage's files first and the driver commits them at its end:
    until then they are unreferenced, and only their age keeps vacuum off them. A
    retention longer than the slowest stage is what makes vacuum beside a running
    job safe."""
    if retain_seconds < wal.min_vacuum_retention:
        raise ConfigError(
            f"--retain {retain!r} is under the retention floor of "
            f"{wal.min_vacuum_retention:g} s (wal.min_vacuum_retention): a stage "
            "still writing has files younger than itself, which vacuum would delete "
            "before its commit points at them; keep --retain above your slowest stage"
        )


def expire_tombstones(sink: SinkInstance, dry_run: bool = False) -> int | None:
    """Remove (or with ``dry_run`` count) the tombstones the sink recorded longer
    than ``cdc.tombstone_retention`` ago, but those of keys with an open
    quarantined upsert: a retry of it would otherwise bring the deleted row back.
    None when the sink keeps no tombstones."""
    config = sink.config
    if not config.cdc or not config.mysql.version_column:
        return None
    retention = parse_duration(config.cdc.tombstone_retention)
    keep = _open_upsert_keys(sink)
    with sink.engine.begin() as conn:
        return Tombstones(config).expire(conn, retention, dry_run, keep)


def _open_upsert_keys(sink: SinkInstance) -> list[tuple[Any, ...]]:
    """The keys of the sink's open quarantine entries a retry would upsert."""
    key, cdc = sink.config.mysql.key, sink.config.cdc
    keys = set()
    for listed in list_entries(sink):
        if listed.is_open and listed.kind == ROW:
            record = json.loads(listed.entry.record)
            if cdc is None or record.get(cdc.op_column) not in cdc.delete_values:
                keys.add(tuple(record.get(k) for k in key))
    return sorted(keys, key=repr)
