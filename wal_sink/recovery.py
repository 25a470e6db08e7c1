"""Start-up: apply every staged batch that has no ack, in batch order, and refuse a
Spark checkpoint that was reset (I7).

Resume state comes only from the two commit records: the WAL (what was staged) and the
ack table (what was applied). The same code path serves the job's start and
``wal-sink recover``.
"""

from __future__ import annotations

import logging

from sqlalchemy import Engine, Table, func, select

from wal_sink.committer import CommitResult, Committer
from wal_sink.errors import CheckpointResetError
from wal_sink.wal import WalReader

log = logging.getLogger(__name__)


def acked_batch_ids(engine: Engine, ack: Table, sink_id: str) -> set[int]:
    with engine.connect() as conn:
        return set(
            conn.execute(
                select(ack.c.batch_id).where(ack.c.sink_id == sink_id)
            ).scalars()
        )


def high_water(engine: Engine, ack: Table, wal: WalReader, sink_id: str) -> int | None:
    """Highest batch id this sink is known to have staged or applied, if any."""
    with engine.connect() as conn:
        acked = conn.execute(
            select(func.max(ack.c.batch_id)).where(ack.c.sink_id == sink_id)
        ).scalar_one()
    known = [b for b in (acked, wal.last_staged(sink_id)) if b is not None]
    return max(known, default=None)


def check_checkpoint(
    sink_id: str, checkpoint: str, planned: int | None, known: int | None
) -> None:
    """Raise CheckpointResetError when the checkpoint is behind what the sink knows.

    Spark re-runs at most its last planned batch, so a sink that staged or applied
    batch ``known`` must be resumed from a checkpoint that planned it. Otherwise batch
    ids restart low and new data would be skipped as "already staged".
    """
    if known is None or (planned is not None and planned >= known):
        return
    seen = "a new checkpoint" if planned is None else f"a checkpoint at batch {planned}"
    raise CheckpointResetError(
        f"the WAL/ack table already hold batch {known} but {checkpoint!r} is {seen}: "
        "the Spark checkpoint was reset or replaced. Restore the original checkpoint, "
        "or give the query a new sink.id (or clear this sink's WAL and ack rows)",
        sink_id=sink_id,
    )


def unacked_batches(committer: Committer) -> list[int]:
    """Staged batches without an ack row, in batch order."""
    committer.wal.refresh()
    staged = committer.wal.staged_batches()
    acked = acked_batch_ids(committer.engine, committer.ack, committer.sink_id)
    return sorted(b for b in staged if b not in acked)


def recover(committer: Committer) -> list[CommitResult]:
    """Apply every staged-but-unacked batch, oldest first."""
    pending = unacked_batches(committer)
    if pending:
        log.info(
            "sink %s: recovering %d unacked batch(es): %s",
            committer.sink_id,
            len(pending),
            pending,
        )
    return [committer.apply(batch_id) for batch_id in pending]
