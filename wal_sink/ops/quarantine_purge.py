"""What ``wal-sink purge`` removes from the quarantine table: never an open entry
unless asked.

- Entries a retry applied go with their batch: a purge that removes batch N from
  the WAL removes its retried entries too. (Entries written before entry ids were
  stored, which a purge cannot name, wait for the next bullet.)
- ``--quarantine-older-than DURATION`` removes every entry set aside longer ago than
  that, open ones included: the operator decided they are not coming back.

The quarantine's entries are removed first, then their retry rows: a crash in
between leaves retry rows of removed entries, which the next purge drops, never an
entry that lost the row saying it was retried (it would be retried again). The
marker saying an apply's entries are superseded goes only with the last of them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from wal_sink.mysql.retry_state import marker
from wal_sink.ops.quarantine_entries import list_entries
from wal_sink.protocol.sink_instance import SinkInstance
from wal_sink.wal.quarantine import LEGACY_ENTRY

IN_LIST = 500
"""Entry ids per delete predicate."""
NAMEABLE = re.compile(r"^[A-Za-z0-9/_.:-]+$")
"""Entry ids a delete predicate can hold as they are (every id the sink writes)."""


@dataclass(frozen=True)
class QuarantinePurgePlan:
    retried: tuple[str, ...]
    """Retried entries of the batches the purge removes."""
    cutoff: datetime | None
    """Entries set aside before this go too (``--quarantine-older-than``)."""
    older: int
    """How many entries the cutoff selects (retried ones of removed batches too)."""
    older_open: int
    """Of those, the entries no retry applied."""

    @property
    def entries(self) -> int:
        return len(self.retried) + self.older


def plan_quarantine_purge(
    sink: SinkInstance, batches: tuple[int, ...], older_than: float | None
) -> QuarantinePurgePlan:
    """Select the retried entries of ``batches`` and of the batches below them
    already gone from the WAL (retried after their batch was purged) and, with
    ``older_than`` (seconds), every entry set aside longer ago than that."""
    if not batches and older_than is None:
        return QuarantinePurgePlan((), None, 0, 0)
    listed = list_entries(sink)
    cutoff = (
        datetime.now(timezone.utc) - timedelta(seconds=older_than)
        if older_than is not None
        else None
    )
    old = [e for e in listed if cutoff is not None and e.entry.recorded_at < cutoff]
    old_ids = {e.entry.entry_id for e in old}
    removed = set(batches)
    if batches:  # and those below them already gone (retried since)
        staged = sink.wal.staged_batches()
        removed |= {
            e.entry.batch_id
            for e in listed
            if e.entry.batch_id < max(batches) and e.entry.batch_id not in staged
        }
    retried = tuple(
        e.entry.entry_id
        for e in listed
        if not e.is_open
        and e.entry.batch_id in removed
        and not e.entry.entry_id.startswith(f"{LEGACY_ENTRY}/")
        and NAMEABLE.match(e.entry.entry_id)
        and e.entry.entry_id not in old_ids
    )
    return QuarantinePurgePlan(retried, cutoff, len(old), sum(e.is_open for e in old))


def execute_quarantine_purge(sink: SinkInstance, plan: QuarantinePurgePlan) -> int:
    """Remove the plan's entries, then the retry rows of entries no longer in the
    quarantine table; returns how many retry rows were dropped."""
    quarantine = sink.quarantine
    if plan.cutoff is not None:
        stamp = plan.cutoff.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        quarantine.delete(f"recorded_at < '{stamp}'")
    for start in range(0, len(plan.retried), IN_LIST):
        named = ", ".join(f"'{i}'" for i in plan.retried[start : start + IN_LIST])
        quarantine.delete(f"entry_id IN ({named})")
    entries = quarantine.entries()
    with sink.engine.begin() as conn:
        # A marker of superseded entries stays while one of them may still be
        # listed: in the quarantine table, or in the outbox on its way there.
        applies = {(e.apply_id, e.batch_id) for e in entries}
        applies |= sink.parts.outbox.applies(conn)
        kept = {e.entry_id for e in entries} | {marker(a, b) for a, b in applies if a}
        return sink.retries.forget(conn, sink.retries.all_ids(conn) - kept)
