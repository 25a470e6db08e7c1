"""Retrying what time may cure — MySQL down or failing over, a deadlock, a busy
object store — for an outage budget (docs/failures.md).

The whole unit of work is retried (a batch transaction, the start-up), never single
statements, with capped exponential backoff and jitter, until ``mysql.outage_budget``
seconds have passed since the first failure. Being asked to stop now (stop_signal.py)
ends the waiting early.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import TypeVar

from wal_sink.config import MysqlConfig
from wal_sink.errors import RetryStopped, TransientError
from wal_sink.protocol.stop_signal import StopSignal

log = logging.getLogger(__name__)

T = TypeVar("T")


class OutageBudget:
    """Backoff for one unit of work; ``wait`` raises once the budget is spent."""

    def __init__(
        self,
        mysql: MysqlConfig,
        what: str,
        stop: StopSignal | None = None,
        on_retry: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.mysql = mysql
        self.what = what
        self.stop = stop or StopSignal()
        self.on_retry = on_retry
        self.clock = clock
        self.first_failure: float | None = None
        self.attempts = 0

    def wait(self, error: TransientError) -> None:
        """Sleep before the next attempt, or raise ``error`` when the budget is
        spent (or ``RetryStopped`` when asked to stop now meanwhile)."""
        now = self.clock()
        if self.first_failure is None:
            self.first_failure = now
        spent = now - self.first_failure
        if spent >= self.mysql.outage_budget:
            log.error(
                "%s: still failing after %.0fs (mysql.outage_budget); giving up",
                self.what,
                spent,
            )
            raise error
        self.attempts += 1
        if self.on_retry is not None:
            self.on_retry()
        backoff = self.mysql.retry_backoff * 2 ** min(self.attempts - 1, 30)
        delay = min(self.mysql.retry_backoff_max, backoff) * random.uniform(0.5, 1.0)
        delay = min(delay, self.mysql.outage_budget - spent)
        log.warning(
            "%s; retry %d of %s in %.1fs (%.0fs of the %.0fs outage budget spent)",
            error,
            self.attempts,
            self.what,
            delay,
            spent,
            self.mysql.outage_budget,
        )
        if self.stop.wait(delay, now=True):
            raise RetryStopped(f"stopped while retrying {self.what}: {error}")


def within_budget(
    work: Callable[[], T],
    mysql: MysqlConfig,
    what: str,
    stop: StopSignal | None = None,
    on_retry: Callable[[], None] | None = None,
) -> T:
    """Run ``work`` until it succeeds, retrying ``TransientError`` in the budget."""
    budget = OutageBudget(mysql, what, stop, on_retry)
    while True:
        try:
            return work()
        except TransientError as e:
            budget.wait(e)
