"""Dropping applied batches from the WAL (I5: never one without an ack row).

The plan is computed from the ack table; a batch that has an ack can never lose it,
so a plan stays safe while it is carried out.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from sqlalchemy import Engine, Table, select

from wal_sink.wal import WalReader
from wal_sink.wal_maintenance import delete_batches


@dataclass(frozen=True)
class PurgePlan:
    remove: tuple[int, ...]
    """Acked batches selected for removal."""
    kept_unacked: tuple[int, ...]
    """Selected by the bound but without an ack row: kept (I5)."""
    rows: int
    bytes: int


def plan_purge(
    engine: Engine,
    ack: Table,
    wal: WalReader,
    sink_id: str,
    *,
    before: int | None = None,
    older_than: float | None = None,
) -> PurgePlan:
    """Select staged batches below ``before`` or acked more than ``older_than``
    seconds ago; only acked ones are removed."""
    if (before is None) == (older_than is None):
        raise ValueError("give exactly one of before / older_than")
    wal.refresh()
    staged = wal.staged_batches()
    with engine.connect() as conn:
        acks = dict(
            conn.execute(
                select(ack.c.batch_id, ack.c.committed_at).where(
                    ack.c.sink_id == sink_id
                )
            ).all()
        )
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


def execute_purge(wal: WalReader, plan: PurgePlan) -> None:
    delete_batches(wal.path, wal.storage, list(plan.remove))
