"""Operator replay: re-apply staged batches in order through the same committer.

Acked batches are re-applied only when forced; a forced replay replaces the ack row
in the batch's own transaction, so ``add`` columns add again (the version guard still
protects ``overwrite`` columns). A replay never runs ahead of batches that are staged
and not applied yet (I8): those are ``recover``'s. Planning reads only, so
``--dry-run`` touches nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from wal_sink.errors import ReplayOrderError
from wal_sink.protocol.batch_rows import ChunkCallback
from wal_sink.protocol.committer import CommitResult
from wal_sink.protocol.recovery import unacked_batches
from wal_sink.protocol.sink_instance import SinkInstance


@dataclass(frozen=True)
class ReplayPlan:
    apply: tuple[int, ...]
    """Batches that will be applied, in order."""
    skipped_acked: tuple[int, ...]
    """Acked batches left alone (no --force)."""
    missing: tuple[int, ...]
    """Ids in the range that the WAL does not hold (never staged, or purged)."""
    reapplied_acked: tuple[int, ...]
    """Acked batches applied again (--force)."""
    rows: int
    changing_columns: tuple[str, ...]
    """The targets' columns whose merge mode changes them again when an acked batch
    is applied again (``add``: merge/modes.py), as ``table.column`` with several
    tables."""

    @property
    def changes_again(self) -> bool:
        """True when acked batches are re-applied into ``changing_columns``."""
        return bool(self.changing_columns and self.reapplied_acked)


def plan_replay(
    instance: SinkInstance, first: int, last: int, *, force: bool
) -> ReplayPlan:
    if first > last:
        raise ValueError(f"--from {first} is after --to {last}")
    instance.wal.refresh()
    staged = instance.wal.staged_batches()
    with instance.engine.connect() as conn:
        acked = instance.acks.acked_between(conn, first, last)
        earlier = [
            b
            for b in unacked_batches(instance.wal, instance.acks, conn, staged)
            if b < first
        ]
    if earlier:
        shown = ", ".join(map(str, earlier[:10])) + (" …" if len(earlier) > 10 else "")
        raise ReplayOrderError(
            f"batch(es) {shown} are staged and not applied yet; replaying from "
            f"{first} would apply later batches before them. Run `wal-sink recover` "
            "first",
            sink_id=instance.sink_id,
        )
    wanted = range(first, last + 1)
    in_wal = [b for b in wanted if b in staged]
    apply = tuple(b for b in in_wal if force or b not in acked)
    several = bool(instance.config.mysql.route_column)
    changing = tuple(
        f"{t.table}.{c}" if several else c
        for t in instance.config.mysql.targets
        for c in t.merge
        if t.mode(c).reapplying_changes
    )
    return ReplayPlan(
        apply=apply,
        skipped_acked=tuple(b for b in in_wal if b not in apply),
        missing=tuple(b for b in wanted if b not in staged),
        reapplied_acked=tuple(b for b in apply if b in acked),
        rows=sum(staged[b].rows for b in apply),
        changing_columns=changing,
    )


def run_replay(
    instance: SinkInstance,
    plan: ReplayPlan,
    *,
    force: bool,
    on_chunk: ChunkCallback | None = None,
    on_batch: Callable[[CommitResult], None] | None = None,
) -> list[CommitResult]:
    """Take the lease (fencing any running job) and apply the plan's batches, one
    transaction each."""
    committer = instance.start()
    results = []
    for batch_id in plan.apply:
        result = committer.apply(batch_id, force=force, on_chunk=on_chunk)
        results.append(result)
        if on_batch is not None:
            on_batch(result)
    return results
