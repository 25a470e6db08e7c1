"""The applying side of the job with ``job.writer = "foreach_batch"`` (the
default): the sink's committer thread, in the job's own process, applies what
foreachBatch stages (its Spark side: spark/foreach_batch_job.py)."""

from __future__ import annotations

import logging
from typing import Protocol

from wal_sink.config import Config
from wal_sink.exit_status import OK
from wal_sink.protocol.stop_signal import Draining, StopSignal, drain_within

log = logging.getLogger("wal_sink.job")


class ThreadedSink(Draining, Protocol):
    """A sink whose committer thread applies what it staged (spark/sink.py's
    WalSink)."""

    @property
    def failure(self) -> BaseException | None:
        """What stopped the committer, if anything did."""

    def close(self, timeout: float | None = None) -> bool:
        """End the committer thread and release the connections."""


class Runner(Protocol):
    """The foreachBatch function."""

    failure: BaseException | None
    """What a batch failed on, if one did."""


class CommitterPath:
    """A SinkPath whose committer thread runs in this process: ``sink`` holds it,
    ``runner`` is the foreachBatch function staging through ``sink``."""

    def __init__(self, config: Config, sink: ThreadedSink, runner: Runner) -> None:
        self.config = config
        self.sink = sink
        self.runner = runner

    def check(self) -> None:
        self.sink.check()  # a committer failure stops the job, even when idle

    def finish(self, stop: StopSignal) -> int:
        """Let the committer apply what is staged — all of it when draining, for up
        to ``job.stop_timeout`` on SIGTERM, nothing more after a second SIGTERM —
        then say how it ended."""
        left = drain_within(
            self.sink,
            stop,
            lambda: self.config.job.stop_timeout if stop.stopping else None,
        )
        if left:
            log.warning(
                "stopped with %d staged batch(es) not yet applied; the next start "
                "applies them",
                left,
            )
            return OK
        log.info("query finished: %s", "stopped" if stop.stopping else "drained")
        return OK

    def cause(self, error: BaseException) -> BaseException:
        return self.runner.failure or self.sink.failure or error

    def close(self) -> None:
        self.sink.close(timeout=0)
