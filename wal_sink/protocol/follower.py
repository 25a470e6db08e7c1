"""``wal-sink follow``: apply staged batches to MySQL as they appear in the WAL, in
batch order, in a process of its own (Step 3 behind the ``wal_sink`` data source).

1. Start: take the lease (epoch + 1: an older follower or job is fenced at its next
   COMMIT), refuse a WAL that is behind the ack table (I7: it was replaced, and new
   batches would be skipped as applied), apply every staged batch without an ack,
   in order (recovery), and publish the applied position beside the WAL.
2. Follow: poll the WAL's log for new versions (log_tail.py: one read per poll,
   every 0.1 s on a local path, 0.5 s on an object store) and hand each stage
   commit to the committer thread (pipeline.py), which applies waiting batches in
   batch order, consecutive ones in one transaction, each with its ack row, within
   the outage budget. After each poll that saw batches applied the newest applied
   batch id is published (applied_position.py): the data source's backpressure.
   Every half minute the lease is checked and the position published again, so an
   idle follower that was fenced stops.
3. Stop: ``stop()`` (SIGTERM) polls once more and lets the committer apply what is
   staged, for up to ``stop_timeout``; ``stop_now()`` (a second SIGTERM) gives up
   waiting at once. Both set the sink instance's stop signal (stop_signal.py),
   which the committer and the outage budget read too. What is not applied stays
   staged for the next start.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable

from wal_sink.errors import (
    CheckpointResetError,
    RetryStopped,
    TransientError,
)
from wal_sink.protocol.pipeline import (
    Applied,
    Handoff,
    Pipeline,
    describe,
    record_applied,
)
from wal_sink.protocol.retry import OutageBudget
from wal_sink.protocol.sink_instance import SinkInstance
from wal_sink.protocol.stop_signal import drain_within
from wal_sink.storage import is_s3
from wal_sink.wal.applied_position import AppliedPosition
from wal_sink.wal.log_tail import LogTail, LogVersion

log = logging.getLogger("wal_sink.follow")

LOCAL_POLL = 0.1
OBJECT_STORE_POLL = 0.5
"""Seconds between two polls of the WAL's log."""
HEARTBEAT = 30.0
"""Seconds between two checks of the lease (and publications of the position)."""
STOP_TIMEOUT = 30.0
"""On stop, how long the committer may apply what is staged, without [job] (whose
stop_timeout says it otherwise)."""


class Follower:
    """Follows one sink's WAL; ``run()`` returns once stopped, or raises what
    stopped the committer (FencedError, TerminalError, a spent outage budget)."""

    def __init__(
        self,
        instance: SinkInstance,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.instance = instance
        self.config = instance.config
        self._stop_timeout = (
            self.config.job.stop_timeout if self.config.job else STOP_TIMEOUT
        )
        self.stop_timeout: float | None = self._stop_timeout
        self.clock = clock
        self.poll_seconds = (
            OBJECT_STORE_POLL if is_s3(self.config.wal_path) else (LOCAL_POLL)
        )
        self.position = AppliedPosition(self.config.wal_path, self.config.storage)
        self.stop_signal = instance.stop
        self._lock = threading.Lock()
        self._applied_upto: int | None = None
        self._published: int | None = None
        self._poll_budget: OutageBudget | None = None
        self.following = threading.Event()
        """Set once the start-up is done and new batches are being followed."""

    @property
    def sink_id(self) -> str:
        return self.config.sink.id

    @property
    def stopping(self) -> bool:
        return self.stop_signal.stopping

    def stop(self, drain: bool = False) -> None:
        """Stop following; what is staged is still applied, for up to the stop
        timeout, or all of it with ``drain`` (until a later ``stop()``: a SIGTERM
        while ``--available-now`` drains)."""
        self.stop_timeout = None if drain else self._stop_timeout
        self.stop_signal.stop_taking_batches()

    def stop_now(self) -> None:
        """Stop waiting for MySQL at once; staged batches stay staged."""
        self.stop_signal.stop_now()

    def run(self) -> int:
        """Follow until stopped; returns how many staged batches were left."""
        # Step 1. Start: lease, the WAL against the acks, recovery, position.
        self.instance.start()
        tail = LogTail(
            self.config.wal_path,
            self.config.storage,
            self.sink_id,
            self._wal_version_checked(),
        )
        recovered = self.instance.recover()
        if recovered:
            log.info(
                "recovered %d batch(es) before following: %s",
                len(recovered),
                [r.batch_id for r in recovered],
            )
        with self.instance.engine.connect() as conn:
            self._applied_upto = self.instance.acks.newest(conn)
        self._publish()
        log.info(
            "sink %s: following %s (applied up to batch %s)",
            self.sink_id,
            self.config.wal_path,
            self._applied_upto,
        )
        # Step 2. Follow.
        pipeline = self.instance.start_pipeline(sys.maxsize, self._applied)
        self.following.set()
        try:
            submitted = self._applied_upto
            beat = self.clock()
            while True:
                pipeline.check()
                stopping = self.stop_signal.stopping
                for version in self._poll(tail):
                    staged = version.staged
                    if staged is None or (
                        submitted is not None and staged.batch_id <= submitted
                    ):
                        continue
                    self.instance.metrics.batches_staged.inc()
                    self.instance.metrics.last_staged_batch.set(staged.batch_id)
                    pipeline.submit(
                        Handoff(staged.batch_id, staged, version.committed_ms)
                    )
                    submitted = staged.batch_id
                self.instance.metrics.batches_pending.set(pipeline.pending)
                if self.clock() - beat >= HEARTBEAT:
                    self._heartbeat()
                    beat = self.clock()
                else:
                    self._publish()
                if stopping:
                    break
                self.stop_signal.wait(self.poll_seconds)
            # Step 3. Stop: apply what is staged, within the timeout.
            left = self._drain(pipeline)
        except RetryStopped:  # stop_now() while MySQL was being waited for
            left = self._left(pipeline.pending)
        finally:
            pipeline.close(timeout=0)  # no further group; one in progress may end
        self._publish()
        return left

    def _poll(self, tail: LogTail) -> list[LogVersion]:
        """New versions of the WAL's log; a read that fails transiently (the
        object store busy or briefly down) is retried at the next polls, within
        the outage budget."""
        try:
            versions = tail.poll()
        except TransientError as e:
            if self._poll_budget is None:
                self._poll_budget = OutageBudget(
                    self.config.mysql,
                    "reading the WAL's log",
                    self.stop_signal,
                    self.instance.metrics.retries.inc,
                )
            self._poll_budget.wait(e)
            return []
        self._poll_budget = None
        return versions

    def _wal_version_checked(self) -> int:
        """The WAL's version before recovery (where following starts; batches
        recovery applies are skipped by id), after checking it is not behind the
        ack table."""
        wal = self.instance.wal
        wal.refresh()
        table = wal.table()
        staged = wal.last_staged(self.sink_id)
        with self.instance.engine.connect() as conn:
            newest = self.instance.acks.newest(conn)
        if newest is not None and (staged is None or staged < newest):
            raise CheckpointResetError(
                f"the ack table has batch {newest} applied, but the WAL at "
                f"{self.config.wal_path} has staged only up to {staged}: it was "
                "replaced or points elsewhere, and new batches would be skipped as "
                "applied. Restore the WAL, or start over with a new sink.id",
                sink_id=self.sink_id,
            )
        return -1 if table is None else table.version()

    def _applied(self, applied: Applied) -> None:
        """Called by the committer thread for each batch it finished."""
        record_applied(self.instance.metrics, applied)
        with self._lock:
            done = applied.result.batch_id
            if self._applied_upto is None or done > self._applied_upto:
                self._applied_upto = done
        log.info("%s", describe(applied))

    def _publish(self, again: bool = False) -> None:
        with self._lock:
            upto = self._applied_upto
        if upto is None or (upto == self._published and not again):
            return
        try:
            self.position.publish(upto, self.instance.epoch)
        except TransientError as e:  # the position lags; the next poll tries again
            log.warning("sink %s: applied position not published: %s", self.sink_id, e)
            return
        self._published = upto

    def _heartbeat(self) -> None:
        """Check the lease (a fenced follower stops) and publish the position
        again (it may have been overwritten by one that was fenced). While MySQL
        is unreachable neither happens."""
        unconfirmed = self.instance.check_lease()
        if unconfirmed is not None:
            log.info("sink %s: lease not checked: %s", self.sink_id, unconfirmed)
            return
        self._publish(again=True)

    @staticmethod
    def _left(pending: int) -> int:
        log.warning(
            "stopped with %d staged batch(es) not yet applied; the next start "
            "applies them",
            pending,
        )
        return pending

    def _drain(self, pipeline: Pipeline) -> int:
        left = drain_within(
            pipeline, self.stop_signal, lambda: self.stop_timeout, clock=self.clock
        )
        if left:
            return self._left(left)
        log.info("sink %s: stopped; every staged batch is applied", self.sink_id)
        return 0
