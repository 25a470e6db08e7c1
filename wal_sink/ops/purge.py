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
purged batches, which the next purge drops), and the newest ack row always stays:
recovery and the checkpoint check (I7) start from it.

``wal-sink purge`` selects first (``select_purge``: reads only, after claiming the
tables), then runs in this order (``run_purge``): tombstones, history events
older than ``history_retention`` (history_fold.py), quarantine entries
(quarantine_purge.py), batches and their ack rows, vacuum.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from wal_sink import faults
from wal_sink.config import Target, WalConfig
from wal_sink.config.spelling import Spelling
from wal_sink.durations import parse_duration, utc_now
from wal_sink.errors import ConfigError
from wal_sink.mysql.tombstones import Tombstones
from wal_sink.ops.history_fold import Folded, fold_histories
from wal_sink.ops.quarantine_entries import ROW, ListedEntry, list_entries
from wal_sink.ops.quarantine_purge import (
    QuarantinePurgePlan,
    execute_quarantine_purge,
    plan_quarantine_purge,
)
from wal_sink.protocol.sink_instance import SinkInstance
from wal_sink.wal.maintenance import VacuumResult, delete_batches, vacuum


@dataclass(frozen=True)
class PurgePlan:
    remove: tuple[int, ...]
    """Acked batches selected for removal."""
    kept_unacked: tuple[int, ...]
    """Selected by the bound but without an ack row: kept (I5)."""
    rows: int
    bytes: int


@dataclass(frozen=True)
class Purge:
    """What one ``wal-sink purge`` is to do, selected before anything changes."""

    batches: PurgePlan | None
    """Acked batches to remove; None when no batch bound was given."""
    quarantine: QuarantinePurgePlan
    """Quarantine entries to remove."""
    quarantine_older_than: float | None
    """Entries set aside longer ago than this (seconds) go too, open ones included."""
    dry_run: bool
    """Say what would be removed; change nothing."""
    vacuum_retain: float | None
    """Vacuum unreferenced files older than this (seconds); None: no vacuum."""


@dataclass(frozen=True)
class PurgeReport:
    """What a purge did, or with ``dry_run`` would do."""

    tombstones: int | None
    """Tombstones removed (counted, dry); None when the sink keeps none."""
    retry_rows: int | None
    """Retry rows of removed quarantine entries dropped; None when no entry went."""
    ack_rows: int | None
    """Ack rows of purged batches dropped; None when no batch went."""
    vacuum: VacuumResult | None
    """Files vacuum freed (counted, dry); None without a vacuum."""
    folded: list[Folded]
    """Each history with a history_retention: the events folded (counted, dry)."""


def select_purge(
    sink: SinkInstance,
    *,
    before: int | None = None,
    older_than: float | None = None,
    quarantine_older_than: float | None = None,
    dry_run: bool = False,
    retain: str | None = None,
    retain_seconds: float | None = None,
) -> Purge:
    """Refuse a vacuum retention under the floor (``retain`` as the operator wrote
    it, in ``retain_seconds``: None, no vacuum), claim the tables unless
    ``dry_run`` (purge commits to the WAL beside a running job), then select the
    batches below ``before`` or acked more than ``older_than`` seconds ago (neither:
    no batch) and the quarantine entries that go with them, or that were set aside
    longer than ``quarantine_older_than`` seconds ago."""
    if retain_seconds is not None:  # before any purge work
        check_retention(sink.config.wal, retain or "", retain_seconds)
    if not dry_run:
        sink.claim_tables()
    batches = None
    if before is not None or older_than is not None:
        batches = plan_purge(sink, before=before, older_than=older_than)
    removed = batches.remove if batches is not None else ()
    return Purge(
        batches=batches,
        quarantine=plan_quarantine_purge(sink, removed, quarantine_older_than),
        quarantine_older_than=quarantine_older_than,
        dry_run=dry_run,
        vacuum_retain=retain_seconds,
    )


def run_purge(sink: SinkInstance, purge: Purge) -> PurgeReport:
    """Carry ``purge`` out (with ``dry_run``: only count the tombstones and what
    vacuum would free): tombstones, quarantine entries, batches, vacuum."""
    dry_run = purge.dry_run
    tombstones = expire_tombstones(sink, dry_run)
    folded = fold_histories(sink, dry_run)
    retry_rows = ack_rows = vacuumed = None
    if not dry_run and purge.quarantine.entries:
        retry_rows = execute_quarantine_purge(sink, purge.quarantine)
    if sink.wal.exists() and not (dry_run and purge.vacuum_retain is None):
        batches = purge.batches
        if not dry_run and batches is not None and batches.remove:
            ack_rows = execute_purge(sink, batches)
        if purge.vacuum_retain is not None:
            vacuumed = vacuum(
                sink.wal.path,
                sink.wal.storage,
                purge.vacuum_retain,
                sink_id=sink.sink_id,
                dry_run=dry_run,
            )
    return PurgeReport(tombstones, retry_rows, ack_rows, vacuumed, folded)


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
        cutoff = utc_now() - timedelta(seconds=older_than)
        selected = [b for b in staged if b in acks and acks[b] < cutoff]
    remove = tuple(b for b in selected if b in acks)
    return PurgePlan(
        remove=remove,
        kept_unacked=tuple(b for b in selected if b not in acks),
        rows=sum(staged[b].rows for b in remove),
        bytes=sum(staged[b].size_bytes for b in remove),
    )


def execute_purge(sink: SinkInstance, plan: PurgePlan) -> int:
    """Remove the plan's batches from the WAL, then their ack rows and those an
    earlier purge left below them (the newest ack row then, or a run killed
    between the two steps): every acked batch below the newest removed one that is
    no longer in the WAL. Returns how many ack rows were dropped."""
    delete_batches(
        sink.wal.path, sink.wal.storage, list(plan.remove), sink_id=sink.sink_id
    )
    faults.hit("purge.before_acks", max(plan.remove))
    sink.wal.refresh()
    staged = sink.wal.staged_batches()
    with sink.engine.begin() as conn:
        below = sink.acks.committed_at(conn, 0, max(plan.remove))
        return sink.acks.forget(conn, sorted(b for b in below if b not in staged))


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
    guarded = [t for t in config.mysql.targets if config.keeps_tombstones(t)]
    if not guarded:
        return None
    retention = parse_duration(config.cdc.tombstone_retention)
    listed = list_entries(sink)
    expired = 0
    with sink.engine.begin() as conn:
        for target in guarded:
            keep = _open_upsert_keys(sink, listed, target)
            tombstones = Tombstones(config, target)
            expired += tombstones.expire(conn, retention, dry_run, keep)
    return expired


def _open_upsert_keys(
    sink: SinkInstance, listed: list[ListedEntry], target: Target
) -> list[tuple[Any, ...]]:
    """The keys of the sink's open quarantine entries a retry would upsert into
    ``target`` (not its deletes or truncates), read by the stream's names, which
    may differ from the config's in case. A key with a NULL matches no tombstone,
    and in the expiry's NOT IN list it would make the condition unknown for every
    tombstone: left out."""
    cdc = sink.config.cdc
    keys = set()
    for entry in listed:
        if entry.is_open and entry.kind == ROW and entry.table == target.table:
            record = json.loads(entry.entry.record)
            spelt = Spelling(record)  # the stream's names; the config's may differ
            if cdc is None or record.get(spelt.of(cdc.op_column)) not in cdc.removing:
                key = tuple(record.get(spelt.of(k)) for k in target.key)
                if None not in key:
                    keys.add(key)
    return sorted(keys, key=repr)
