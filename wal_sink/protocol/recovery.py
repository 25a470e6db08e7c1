"""Start-up: apply every staged batch that has no ack, in batch order, and refuse a
Spark checkpoint that was reset (I7).

Resume state comes only from the two commit records: the WAL (what was staged, up to
its application transaction's version) and the ack table (what was applied). Batches
are applied in order (I8), so everything up to the newest ack is applied; what is
staged beyond it is not. The same code path serves the job's start and
``wal-sink recover``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from sqlalchemy import Connection, Engine

from wal_sink.errors import CheckpointResetError
from wal_sink.mysql.acks import AckTable
from wal_sink.protocol.committer import CommitResult, Committer
from wal_sink.protocol.parts import SinkParts
from wal_sink.wal.model import BatchState, StagedBatch
from wal_sink.wal.reader import WalReader

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class KnownBatches:
    """What the two commit records know of a sink, read when its lease is taken."""

    staged: int | None
    """Highest batch id the WAL's app transaction records (a purge keeps it)."""
    acked: int | None
    """Highest acked batch id (a purge keeps the newest ack row)."""

    @property
    def newest(self) -> int | None:
        """Highest batch id this sink staged or applied, if any."""
        known = [b for b in (self.staged, self.acked) if b is not None]
        return max(known, default=None)


def known_batches(conn: Connection, acks: AckTable, wal: WalReader) -> KnownBatches:
    return KnownBatches(staged=wal.last_staged(acks.sink_id), acked=acks.newest(conn))


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
        "or start over with a new sink.id and a wal.path of its own (or clear this "
        "sink's WAL and ack rows)",
        sink_id=sink_id,
    )


def check_commit_log(
    sink_id: str, checkpoint: str, committed: int | None, known: KnownBatches
) -> None:
    """Raise CheckpointResetError when Spark's commit log is ahead of the sink (I7).

    Spark commits a batch only after the sink staged it, and resumes after the
    newest committed one. A committed batch above everything the WAL and the ack
    table know was staged into a WAL that is gone — deleted, moved, or another
    ``wal.path`` — and would never be applied.
    """
    newest = known.newest
    if committed is None or (newest is not None and committed <= newest):
        return
    first = 0 if newest is None else newest + 1
    span = str(committed) if first == committed else f"{first}..{committed}"
    raise CheckpointResetError(
        f"Spark's commit log at {checkpoint!r} holds batch {committed}, but the "
        f"newest batch the WAL knows is {_maybe(known.staged)} and the newest acked "
        f"is {_maybe(known.acked)}: batch(es) {span} were staged into a WAL that is "
        "gone (deleted, moved, or "
        "wal.path changed) and were never applied. Restore the WAL at wal.path; to "
        "start the sink over, remove its checkpoint too",
        sink_id=sink_id,
    )


def _maybe(batch_id: int | None) -> str:
    return "none" if batch_id is None else str(batch_id)


def unacked_batches(
    wal: WalReader,
    acks: AckTable,
    conn: Connection,
    staged: dict[int, StagedBatch],
) -> list[int]:
    """Staged batches without an ack row, in batch order (``pending_batches``).

    ``staged`` is ``wal.staged_batches()``, listed by the caller after a refresh
    (every caller needs that listing too).
    """
    last = wal.last_staged(acks.sink_id)
    if last is None:
        return []
    newest = acks.newest(conn)
    first = min(staged, default=last)
    acked = acks.acked_between(conn, first, last) if staged else set()
    return pending_batches(
        staged,
        acked,
        last,
        newest,
        lambda b: wal.state_without_files(b, acks.sink_id) is not BatchState.NOT_STAGED,
    )


def pending_batches(
    staged: Iterable[int],
    acked: set[int],
    last: int,
    newest: int | None,
    was_staged: Callable[[int], bool],
) -> list[int]:
    """The batches to apply, in order, from what the WAL and the ack table say.

    ``staged`` are the batches with files in the WAL, ``acked`` the acked ones
    among them or between them and ``last`` (the highest batch the WAL's app
    transaction records), ``newest`` the newest ack row. Batches with files are
    listed unless acked; a batch beyond the newest ack with no files is listed when
    the WAL's history says it was staged (``was_staged``): empty (staged by
    wal_sink 0.1 without any file: it is acked with no rows) or missing, whose
    files were removed, so that applying it fails naming it (I1) rather than it
    being skipped.
    """
    staged = set(staged)
    pending = {b for b in staged if b not in acked}
    first = min(staged, default=last)
    start = newest + 1 if newest is not None else first
    for batch_id in range(start, last + 1):
        if batch_id in staged or batch_id in acked:
            continue
        if was_staged(batch_id):
            pending.add(batch_id)
    return sorted(pending)


def groups(batches: Iterable[tuple[int, int]], max_rows: int) -> list[list[int]]:
    """Split (batch id, rows) pairs, in order, into runs of consecutive ids whose
    rows stay within ``max_rows``: one transaction each. A batch larger than
    ``max_rows`` is a group of its own."""
    result: list[list[int]] = []
    rows = 0
    for batch_id, batch_rows in batches:
        current = result[-1] if result else None
        if (
            current is not None
            and batch_id == current[-1] + 1
            and rows + batch_rows <= max_rows
        ):
            current.append(batch_id)
            rows += batch_rows
        else:
            result.append([batch_id])
            rows = batch_rows
    return result


def recover(
    committer: Committer, parts: SinkParts, engine: Engine
) -> list[CommitResult]:
    """Move rows an earlier process left in the outbox to the quarantine, then
    apply every staged-but-unacked batch, oldest first, consecutive ones in shared
    transactions, with ``committer`` (which holds the lease)."""
    wal, acks = parts.wal, parts.acks
    committer.drain_outbox()
    wal.refresh()
    staged = wal.staged_batches()
    with engine.connect() as conn:
        pending = unacked_batches(wal, acks, conn, staged)
    if not pending:
        return []
    log.info(
        "sink %s: recovering %d unacked batch(es): %s",
        acks.sink_id,
        len(pending),
        _span(pending),
    )
    max_rows = parts.config.mysql.max_transaction_rows
    # A batch without files goes alone (counted over the limit): should it turn out
    # missing, the batches before it are applied first.
    sizes = [(b, staged[b].rows if b in staged else max_rows + 1) for b in pending]
    results: list[CommitResult] = []
    for group in groups(sizes, max_rows):
        results += committer.apply_group(
            [staged.get(b, b) for b in group]  # batches without files: looked up
        )
    return results


def _span(ids: list[int]) -> str:
    return ", ".join(map(str, ids)) if len(ids) <= 10 else f"{ids[0]}..{ids[-1]}"
