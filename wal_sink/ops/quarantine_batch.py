"""``wal-sink quarantine-batch N``: the way forward for a staged batch that fails
for a reason no row carries, so that it would stop the sink at every start.

Its rows go to the quarantine table and its ack row says ``quarantined``: it is
never applied, and the batches after it flow again. Exactly once, and in batch
order (I8):

- only the lowest staged batch without an ack is taken: setting aside a later one
  would ack it before an earlier batch is applied;
- the committer's own transaction does it (committer.py): lock the lease row and
  check the epoch, a locking read of the batch's ack, the ack row marked
  quarantined, every row into the outbox keyed to this apply, COMMIT; the outbox
  then drains into the quarantine table under its app transaction.

Like ``recover`` and ``replay`` it takes the lease, fencing a running job of the
sink; the order is checked again once the lease is held.
"""

from __future__ import annotations

from dataclasses import dataclass

from wal_sink.errors import SetAsideRefused
from wal_sink.protocol.committer import CommitResult
from wal_sink.protocol.recovery import unacked_batches
from wal_sink.protocol.sink_instance import SinkInstance


@dataclass(frozen=True)
class SetAsidePlan:
    batch_id: int
    rows: int
    """Rows staged in the batch, all bound for the quarantine table."""


def plan_set_aside(instance: SinkInstance, batch_id: int) -> SetAsidePlan:
    """Check that ``batch_id`` is the lowest staged batch without an ack."""
    instance.wal.refresh()
    staged = instance.wal.staged_batches()
    with instance.engine.connect() as conn:
        pending = unacked_batches(instance.wal, instance.acks, conn, staged)
        acked = instance.acks.acked_between(conn, batch_id, batch_id)
    if batch_id not in pending:
        state = (
            "has an ack already"
            if acked
            else "is not in the WAL (never staged, or purged)"
        )
        raise SetAsideRefused(
            f"batch {batch_id} {state}: there is nothing to set aside",
            sink_id=instance.sink_id,
        )
    if pending[0] != batch_id:
        earlier = [b for b in pending if b < batch_id]
        shown = ", ".join(map(str, earlier[:10])) + (" …" if len(earlier) > 10 else "")
        raise SetAsideRefused(
            f"batch(es) {shown} are staged and not applied before batch {batch_id}; "
            "only the lowest unapplied batch may be set aside, so that batches keep "
            f"their order. Run `wal-sink recover`, or set aside batch {pending[0]} "
            "first",
            sink_id=instance.sink_id,
        )
    batch = staged.get(batch_id)
    return SetAsidePlan(batch_id, batch.rows if batch is not None else 0)


def set_aside_batch(instance: SinkInstance, plan: SetAsidePlan) -> CommitResult:
    """Take the lease (fencing a running job), check the order again, and set the
    batch aside in one transaction."""
    committer = instance.start()
    plan_set_aside(instance, plan.batch_id)
    return committer.set_aside(plan.batch_id)
