"""The applying side of the job with ``job.writer = "datasource"``: its query stages
through ``format("wal_sink")`` (the Spark side: spark/datasource_job.py) and a
follower child process (follower_child.py) applies staged batches to MySQL, as the
foreachBatch path's committer thread does.

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

from wal_sink import errors
from wal_sink.config import Config
from wal_sink.errors import ConfigError, FollowerFailed, TerminalError, WalSinkError
from wal_sink.exit_status import OK, TERMINAL, USAGE
from wal_sink.job.follower_child import FollowerChild
from wal_sink.protocol.stop_signal import StopSignal

log = logging.getLogger("wal_sink.job")

SINK_ERROR = re.compile(r"wal_sink\.errors\.(\w+): (.+)")
CLOSE_SECONDS = 30.0


class FollowerPath:
    """A SinkPath whose follower runs in a child process, started once the query's
    stream is checked (``start_follower``)."""

    def __init__(self, config: Config, config_path: str, stop: StopSignal) -> None:
        self.config = config
        self.stop = stop
        self.config_path = str(Path(config_path).resolve())
        self.follower: FollowerChild | None = None

    def start_follower(self) -> None:
        self.follower = FollowerChild(self.config_path)

    def check(self) -> None:
        code = self.follower.poll()
        if code is not None:
            raise _exit_error(code)

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
