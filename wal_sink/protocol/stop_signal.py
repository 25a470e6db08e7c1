"""How far one sink instance has been asked to stop (docs/protocol.md, on stop): the
one object that whoever stops it sets — the job's SIGTERM handling, the follower's
commands — and every part that must stop reads.

Two levels, each set once and never cleared:

- **stop taking batches**: no further batch is staged (the foreachBatch function
  refuses the next one, a batch waiting for room gives up, the follower stops
  polling the WAL); what is staged is still applied, within ``job.stop_timeout``.
- **stop now**: stop waiting for MySQL too (the outage budget gives up its wait,
  draining ends); staged batches stay staged.

Nothing is lost at either level: what is not applied stays staged in the WAL, and
the next start's recovery applies it.
"""

from __future__ import annotations

import threading
import time

TAKE_NO_BATCHES, NOW = 1, 2
# A signal handler runs in the main thread between two bytecodes, possibly while
# that thread is inside ``wait`` here: the lock is reentrant so the handler cannot
# deadlock on it, and waits are sliced so a wake-up it slips past costs this much.
WAKE_SECONDS = 0.25


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
