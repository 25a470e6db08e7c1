"""The stop policy (docs/protocol.md, on stop): how far one sink instance has been
asked to stop, how signals ask it, and how long what is staged may still be applied.

``StopSignal`` is the one object that whoever stops a sink instance sets — the job's
SIGTERM handling, ``wal-sink follow``'s, the follower child's commands — and every
part that must stop reads. Two levels, each set once and never cleared:

- **stop taking batches**: no further batch is staged (the foreachBatch function
  refuses the next one, a batch waiting for room gives up, the follower stops
  polling the WAL); what is staged is still applied, within ``job.stop_timeout``.
- **stop now**: stop waiting for MySQL too (the outage budget gives up its wait,
  draining ends); staged batches stay staged.

``SignalCounter`` turns signals into those levels: the first signal asks to stop
taking batches, a second to stop now. ``drain_within`` is the wait for what is
staged (or a batch in progress) once stopping: it ends when all is done, at stop
now, or when the stop timeout has passed.

Nothing is lost at either level: what is not applied stays staged in the WAL, and
the next start's recovery applies it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Protocol

TAKE_NO_BATCHES, NOW = 1, 2
# A signal handler runs in the main thread between two bytecodes, possibly while
# that thread is inside ``wait`` here: the lock is reentrant so the handler cannot
# deadlock on it, and waits are sliced so a wake-up it slips past costs this much.
WAKE_SECONDS = 0.25
SAME_SIGNAL_SECONDS = 1.0
"""Under spark-submit one SIGTERM to the process group reaches both the JVM and
Python: two signals this close count as one."""
DRAIN_STEP = 0.25
"""How often ``drain_within`` looks at the stop signal and the time."""


class StopSignal:
    """The two levels of stopping; thread-safe, and safe to set from a signal
    handler."""

    def __init__(self) -> None:
        self._level = 0
        self._changed = threading.Condition(threading.RLock())

    @property
    def stopping(self) -> bool:
        """Asked to stop taking batches (or to stop now)."""
        return self._level >= TAKE_NO_BATCHES

    @property
    def now(self) -> bool:
        """Asked to stop now: nothing more waits for MySQL."""
        return self._level >= NOW

    def stop_taking_batches(self) -> None:
        self._rise(TAKE_NO_BATCHES)

    def stop_now(self) -> None:
        self._rise(NOW)

    def wait(self, timeout: float, *, now: bool = False) -> bool:
        """Sleep up to ``timeout`` seconds, less if asked to stop (to stop now, with
        ``now``) meanwhile; returns whether it was."""
        level = NOW if now else TAKE_NO_BATCHES
        deadline = time.monotonic() + timeout
        with self._changed:
            while self._level < level:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(min(left, WAKE_SECONDS))
            return True

    def _rise(self, level: int) -> None:
        with self._changed:
            self._level = max(self._level, level)
            self._changed.notify_all()


class SignalCounter:
    """Counts stop signals into ``stop``: the first asks it to stop taking batches,
    the second (and any later one) to stop now. A signal within ``same_within``
    seconds of the one before is that one again (one signal reaching two
    processes), and is not counted."""

    def __init__(
        self,
        stop: StopSignal,
        same_within: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stop = stop
        self.same_within = same_within
        self.clock = clock
        self.signals = 0
        self._last = float("-inf")

    def record(self) -> int:
        """Count one signal; returns how many were counted so far, or 0 when this
        one was not (the one before, again)."""
        now = self.clock()
        counted = now - self._last > self.same_within
        self._last = now
        if not counted:
            return 0
        self.signals += 1
        if self.signals == 1:
            self.stop.stop_taking_batches()
        else:
            self.stop.stop_now()
        return self.signals


class Draining(Protocol):
    """Work that ``drain_within`` waits for: a committer thread (its pipeline, or
    the sink holding it), or a query's trigger in progress."""

    @property
    def pending(self) -> int:
        """How much is not done yet (staged batches not applied, triggers)."""

    def check(self) -> None:
        """Raise what stopped the work, if anything did."""

    def drain(self, timeout: float | None = None) -> bool:
        """Wait up to ``timeout`` seconds for all of it; whether it is done."""


def drain_within(
    work: Draining,
    stop: StopSignal,
    timeout: Callable[[], float | None],
    *,
    step: float = DRAIN_STEP,
    clock: Callable[[], float] = time.monotonic,
) -> int:
    """Wait until ``work`` has nothing pending; returns how much is left (0: all
    done). It gives up, leaving the rest, once ``stop`` says stop now or
    ``timeout()`` seconds have passed since the call (None: no limit; read at every
    step, as a stop may set a limit on a drain that had none). Raises what
    ``work.check`` raises."""
    started = clock()
    while True:
        work.check()
        limit = timeout()
        if work.pending and (
            stop.now or (limit is not None and clock() - started > limit)
        ):
            return work.pending
        if work.drain(step):
            return 0
