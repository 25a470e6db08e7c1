"""Restart strategies as Flink users know them: fixed-delay, failure-rate, none.

The job asks ``allow_restart()`` after each query failure; when it says no, the job
exits non-zero and leaves the decision to whatever supervises it.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

from wal_sink.config import RestartConfig


class RestartPolicy:
    def __init__(
        self, config: RestartConfig, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.config = config
        self.clock = clock
        self.restarts = 0
        self._failures: deque[float] = deque()

    @property
    def delay(self) -> float:
        return self.config.delay

    def allow_restart(self) -> bool:
        """Record a failure and say whether the strategy allows another attempt."""
        strategy = self.config.strategy
        if strategy == "none":
            return False
        if strategy == "fixed-delay":
            if self.restarts >= self.config.attempts:
                return False
        else:  # failure-rate
            now = self.clock()
            self._failures.append(now)
            while self._failures and now - self._failures[0] > self.config.interval:
                self._failures.popleft()
            if len(self._failures) > self.config.max_failures:
                return False
        self.restarts += 1
        return True

    def describe(self) -> str:
        c = self.config
        if c.strategy == "fixed-delay":
            return f"restart {self.restarts}/{c.attempts}"
        if c.strategy == "failure-rate":
            return (
                f"restart {self.restarts} ({len(self._failures)} failure(s) in "
                f"{c.interval:.0f}s, at most {c.max_failures})"
            )
        return "no restarts"
