"""The committer behind Spark (docs/protocol.md, step 3): a thread in the driver applies
staged batches to MySQL strictly in batch order while Spark computes and stages the
next ones.

- ``submit`` hands over a staged batch; when ``wal.max_pending`` batches already wait,
  it blocks first, so Spark reads no further (backpressure).
- The thread takes every batch waiting, in order, and applies consecutive ones in one
  transaction while their rows stay under ``mysql.max_transaction_rows`` (I3, I8: a
  group commits whole, after every earlier group).
- Transient errors are retried inside the committer for the outage budget, so a MySQL
  restart or failover does not stop staging. A failure it cannot ride out stops the
  thread; the next ``submit`` (or ``check``) raises it, at a batch boundary.
- ``drain`` waits until everything staged is applied (or a timeout); what is left
  stays staged in the WAL for the next start's recovery.
- Asked to stop taking batches (stop_signal.py), a batch waiting for room gives up;
  ``close`` ends the thread after the group in progress.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from wal_sink.errors import StopRequested
from wal_sink.metrics import SinkMetrics
from wal_sink.protocol.committer import CommitResult, Committer
from wal_sink.protocol.recovery import groups
from wal_sink.protocol.stop_signal import StopSignal
from wal_sink.wal.model import StagedBatch

log = logging.getLogger(__name__)

STOP_POLL_SECONDS = 0.1
"""How often a batch waiting for room looks at the stop signal."""


@dataclass(frozen=True)
class Handoff:
    """A staged batch waiting for MySQL."""

    batch_id: int
    batch: StagedBatch | None
    """As staging committed it; None when an earlier attempt staged it."""
    planned_ms: float | None
    """When Spark planned the batch (its offset log entry), for the lag."""


@dataclass(frozen=True)
class Applied:
    """A batch the committer finished, for the per-batch log line and metrics."""

    handoff: Handoff
    result: CommitResult
    committed_at: float
    """time.time() right after COMMIT."""
    pending: int
    """Batches still waiting after this group."""

    @property
    def lag_ms(self) -> float | None:
        """From Spark planning the batch to its MySQL COMMIT."""
        planned = self.handoff.planned_ms
        return None if planned is None else self.committed_at * 1000 - planned


def describe(applied: Applied) -> str:
    """The per-batch line of a batch the committer finished (the job's and
    ``wal-sink follow``'s)."""
    r = applied.result
    if not r.applied:
        return f"batch {r.batch_id} already applied"
    lag = "-" if applied.lag_ms is None else f"{applied.lag_ms:.0f}"
    tables = ""
    if r.tables:  # several tables: each one's rows, strays as "-"
        tables = " tables=" + ",".join(
            f"{name or '-'}:{c.upserted + c.deleted + c.skipped + c.set_aside}"
            for name, c in r.tables.items()
        )
    return (
        f"batch {r.batch_id} applied: rows={r.rows} deleted={r.deleted} "
        f"quarantined={r.quarantined}"
        + (f" skipped={r.skipped}" if r.skipped else "")
        + tables
        + f" commit_ms={r.seconds * 1000:.0f} "
        f"lag_ms={lag} pending={applied.pending}"
    )


def record_applied(metrics: SinkMetrics, applied: Applied) -> None:
    """The metrics of a batch the committer finished."""
    result = applied.result
    if result.applied:
        metrics.batches_applied.inc()
        for table, c in result.by_table().items():
            metrics.count_rows(table, c.upserted, c.deleted, c.set_aside, c.skipped)
        if applied.lag_ms is not None:
            metrics.lag_seconds.observe(max(0.0, applied.lag_ms / 1000))
    metrics.last_applied_batch.set(result.batch_id)
    metrics.batches_pending.set(applied.pending)


class Pipeline:
    """One committer thread for one sink instance."""

    def __init__(
        self,
        committer: Committer,
        stop: StopSignal,
        *,
        max_pending: int,
        max_transaction_rows: int,
        on_applied: Callable[[Applied], None] | None = None,
    ) -> None:
        """``committer`` applies the groups (its ``apply_group``); ``stop`` is the
        sink instance's stop signal."""
        self.committer = committer
        self.stop = stop
        self.max_pending = max_pending
        self.max_transaction_rows = max_transaction_rows
        self.on_applied = on_applied
        self._waiting: deque[Handoff] = deque()
        self._busy = 0
        """Batches taken by the thread and not yet committed."""
        self._failure: BaseException | None = None
        self._closed = False
        """The thread's own end (``close``), not a stop of the sink: a job closes
        one pipeline per attempt and starts another after a restart."""
        self._changed = threading.Condition()
        self._thread = threading.Thread(
            target=self._run,
            name=f"wal-sink-committer-{committer.sink_id}",
            daemon=True,
        )
        self._thread.start()

    @property
    def pending(self) -> int:
        """Staged batches not yet committed (waiting or being applied)."""
        with self._changed:
            return len(self._waiting) + self._busy

    @property
    def failure(self) -> BaseException | None:
        return self._failure

    def check(self) -> None:
        """Raise the committer's failure, if it stopped on one."""
        if self._failure is not None:
            raise self._failure

    def wait_for_room(self) -> None:
        """Block while ``max_pending`` batches wait (backpressure); raise the
        committer's failure instead if it has one, or ``StopRequested`` once the
        sink is asked to stop taking batches (what is submitted already is still
        applied)."""
        with self._changed:
            while (
                self._failure is None
                and not self.stop.stopping
                and len(self._waiting) + self._busy >= self.max_pending
            ):
                self._changed.wait(STOP_POLL_SECONDS)
            stopping = self.stop.stopping
        self.check()
        if stopping:
            raise StopRequested(
                "stopping: this batch is not staged; Spark plans it again at the "
                "next start",
                sink_id=self.committer.sink_id,
            )

    def submit(self, handoff: Handoff) -> None:
        """Queue a staged batch; ids arrive in order, one after another. A batch
        staged while the sink began to stop is still taken: ``drain`` applies it."""
        with self._changed:
            self.check()
            if self._closed:
                raise StopRequested(
                    "stopping: this batch is staged and applied at the next start",
                    sink_id=self.committer.sink_id,
                    batch_id=handoff.batch_id,
                )
            self._waiting.append(handoff)
            self._changed.notify_all()

    def drain(self, timeout: float | None = None) -> bool:
        """Wait until every submitted batch is committed; False on timeout or when
        the committer failed (its failure is then in ``failure``)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._changed:
            while self._failure is None and (self._waiting or self._busy):
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._changed.wait(left)
            return self._failure is None

    def close(self, timeout: float | None = None) -> bool:
        """End the thread after the group in progress, waiting up to ``timeout``
        seconds (None: no limit) for that group; waiting batches stay staged.
        Returns whether the thread ended; False when the committer is still in
        its transaction (MySQL hanging, or the caller gave no time)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._changed:
            self._closed = True
            self._changed.notify_all()
            while self._busy:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._changed.wait(left)
        # Past its last group the thread only reports it (on_applied), then ends.
        self._thread.join()
        return True

    def _run(self) -> None:
        while True:
            with self._changed:
                while not self._waiting and not self._closed:
                    self._changed.wait()
                if self._closed:
                    return
                taken = self._take()
                self._busy = len(taken)
            try:
                results = self.committer.apply_group(
                    [h.batch or h.batch_id for h in taken]
                )
            except BaseException as e:  # handed to the caller at a batch boundary
                with self._changed:
                    self._failure = e
                    self._busy = 0
                    self._changed.notify_all()
                return
            committed_at = time.time()
            with self._changed:
                self._busy = 0
                left = len(self._waiting)
                self._changed.notify_all()
            if self.on_applied is not None:
                for handoff, result in zip(taken, results):
                    self.on_applied(Applied(handoff, result, committed_at, left))

    def _take(self) -> list[Handoff]:
        """The longest run of waiting batches that fits in one transaction."""
        sizes = [(h.batch_id, h.batch.rows if h.batch else 0) for h in self._waiting]
        first = groups(sizes, self.max_transaction_rows)[0]
        return [self._waiting.popleft() for _ in first]
