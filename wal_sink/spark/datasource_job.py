"""The job with ``job.writer = "datasource"``: its query stages through
``format("wal_sink")`` and a follower child process (follower_child.py) applies
staged batches to MySQL, as the foreachBatch path's committer thread does.

Each attempt starts a follower, which takes the lease and recovers unacked batches
while the query starts (the data source's backpressure holds the query back until
the follower has caught up). SIGTERM stops the query and tells the follower to
apply what is staged within ``job.stop_timeout``; a second SIGTERM tells it to stop
at once; ``--available-now`` lets it apply everything staged. A follower that exits
stops the job like a committer failure: a configuration error (2) or a terminal
one (3) at once, a spent outage budget (1) through the restart strategy. Errors
the data source raised in the query (fenced, a reset checkpoint) are found in the
query's failure and are terminal too.
"""

from __future__ import annotations

import logging
import re
import time
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import DataStreamWriter, StreamingQuery

from wal_sink import errors
from wal_sink.config import Config
from wal_sink.errors import ConfigError, FollowerFailed, TerminalError, WalSinkError
from wal_sink.exit_status import OK, TERMINAL, USAGE
from wal_sink.job.follower_child import FollowerChild
from wal_sink.protocol.sink_instance import SinkInstance
from wal_sink.protocol.stop_signal import StopSignal, drain_within
from wal_sink.spark.datasource import NAME
from wal_sink.spark.sink import check_stream

log = logging.getLogger("wal_sink.job")

SINK_ERROR = re.compile(r"wal_sink\.errors\.(\w+): (.+)")
CLOSE_SECONDS = 30.0
TRIGGER_POLL = 0.05
"""How often a stop looks whether the trigger in progress has ended."""


class DataSourcePath:
    def __init__(self, config: Config, config_path: str, stop: StopSignal) -> None:
        self.config = config
        self.stop = stop
        self.config_path = str(Path(config_path).resolve())
        self.follower: FollowerChild | None = None

    def start(self, spark: SparkSession, frame: DataFrame) -> None:
        instance = SinkInstance(self.config)  # no lease: the follower takes it
        try:
            check_stream(instance, frame.schema)
        finally:
            instance.close()
        self.follower = FollowerChild(self.config_path)

    def attach(self, writer: DataStreamWriter) -> DataStreamWriter:
        return writer.format(NAME).option("config", self.config_path)

    def fold_parse_errors(self, frame: DataFrame) -> bool:
        return False  # the data source stages the query's rows as they come

    def check(self) -> None:
        code = self.follower.poll()
        if code is not None:
            raise _exit_error(code)

    def stop_between_batches(self, queries: list[StreamingQuery]) -> None:
        """Let the trigger in progress end (for up to ``job.stop_timeout``, or
        until a second SIGTERM), then stop the queries: stopping one mid-batch
        interrupts Spark's tasks and Python workers, and the batch is run again at
        the next start (nothing is lost, but work is)."""
        drain_within(
            TriggersInProgress(queries),
            self.stop,
            lambda: self.config.job.stop_timeout,
            step=TRIGGER_POLL,
        )
        for query in queries:
            query.stop()

    def finish(self, stop: StopSignal) -> int:
        """The query ended: the follower applies what is staged — all of it when
        draining, for up to ``job.stop_timeout`` on SIGTERM (the follower keeps
        the time), nothing more after a second SIGTERM — and exits."""
        follower = self.follower
        follower.command("stop" if stop.stopping else "drain")
        while (code := follower.wait(0.25)) is None:
            if stop.stopping and "stop" not in follower.sent:
                follower.command("stop")  # SIGTERM while draining
            if stop.now and "now" not in follower.sent:
                follower.command("now")
        if code != OK:
            raise _exit_error(code)
        log.info("query finished: %s", "stopped" if stop.stopping else "drained")
        return OK

    def cause(self, error: BaseException) -> BaseException:
        return sink_error_in(error)

    def close(self) -> None:
        """A follower still running (the query failed, or the job is leaving) is
        told to stop now; what it has not applied stays staged."""
        follower = self.follower
        if follower is None or follower.poll() is not None:
            return
        follower.command("now")
        started = time.monotonic()
        if follower.wait(CLOSE_SECONDS) is None:
            log.warning(
                "the follower did not stop within %.0fs of being told; killed",
                time.monotonic() - started,
            )
            follower.kill()


class TriggersInProgress:
    """The queries' triggers in progress, as ``drain_within`` waits for them."""

    def __init__(self, queries: list[StreamingQuery]) -> None:
        self.queries = queries

    @property
    def pending(self) -> int:
        return sum(q.isActive and q.status["isTriggerActive"] for q in self.queries)

    def check(self) -> None:
        pass

    def drain(self, timeout: float | None = None) -> bool:
        """Poll until no trigger is in progress, for up to ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.pending:
            if deadline is not None and time.monotonic() >= deadline:
                return False
            time.sleep(TRIGGER_POLL)
        return True


def sink_error_in(error: BaseException) -> BaseException:
    """The data source's own error, when the query failed on one: its class and
    line are in the Python traceback the query's failure carries (every class of
    errors.py is rebuilt); else ``error``."""
    found = SINK_ERROR.findall(str(error))
    if found:
        name, line = found[-1]
        kind = getattr(errors, name, None)
        if isinstance(kind, type) and issubclass(kind, WalSinkError):
            return kind(line.strip())
    return error


def _exit_error(code: int) -> WalSinkError:
    """The error the follower's exit ``code`` stands for (exit_status.py)."""
    if code == USAGE:
        return ConfigError("the follower stopped on a configuration error (above)")
    if code == TERMINAL:
        return TerminalError("the follower stopped on the error above")
    return FollowerFailed(f"the follower exited with code {code}")
