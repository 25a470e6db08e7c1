"""The streaming job's supervisor: attempts of the job, restarted by a strategy
(restart.py), until it drains, is stopped, or the strategy gives up.

Each attempt is a SinkPath and the Queries that stage through it (sink_path.py),
built by the Spark side (spark/job.py). The attempt's start takes the lease, checks
the checkpoint and applies unacked batches (recovery) before the queries start from
their checkpoint. Once the stop signal says stop taking batches (SIGTERM), the
queries stop after the batch in progress and the path applies what is staged, for
up to ``job.stop_timeout`` (protocol/stop_signal.py). Exit codes (exit_status.py):
0 done (drained, or stopped), 1 failed (the restart strategy gave up, or a terminal
error), 2 configuration error.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from wal_sink.errors import TerminalError, first_line
from wal_sink.exit_status import FAILED, OK, exit_code
from wal_sink.job.restart import RestartPolicy
from wal_sink.job.sink_path import Queries, SinkPath
from wal_sink.metrics import SinkMetrics
from wal_sink.protocol.stop_signal import StopSignal

log = logging.getLogger("wal_sink.job")

AWAIT_SECONDS = 0.25
"""How long each look at the queries waits on each of them."""


def supervise(
    attempt: Callable[[], tuple[SinkPath, Queries]],
    stop: StopSignal,
    policy: RestartPolicy,
    metrics: SinkMetrics,
) -> int:
    """Run attempts (``attempt()`` builds each) until one drains or is stopped, or
    ``policy`` allows no further one; returns the job's exit code."""
    while True:
        path, queries = attempt()
        try:
            queries.start()
            while queries.running(AWAIT_SECONDS):
                path.check()
                if stop.stopping:
                    queries.stop_between_batches()
            return path.finish(stop)
        except TerminalError as e:  # a configuration error included
            log.error("%s", e)
            return exit_code(e)
        except Exception as e:  # StreamingQueryException, TransientError, lost MySQL
            cause = path.cause(e)
            if stop.stopping and not isinstance(cause, TerminalError):
                return path.finish(stop)
            if isinstance(cause, TerminalError):
                log.error("%s", cause)
                return exit_code(cause)
            reason = first_line(cause)
            if not policy.allow_restart():
                log.error(
                    "query failed: %s; restart strategy %r gives up",
                    reason,
                    policy.config.strategy,
                )
                return FAILED
            metrics.restarts.inc()
            log.warning(
                "query failed: %s; %s in %.0fs", reason, policy.describe(), policy.delay
            )
            if stop.wait(policy.delay):  # SIGTERM while waiting to restart
                return OK
        finally:
            queries.stop()
            path.close()
