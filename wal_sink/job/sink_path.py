"""What the job's supervisor (supervisor.py) drives in each attempt, without Spark:
the way the attempt applies what its query stages (SinkPath), and the Spark side of
the attempt (Queries, built by spark/job.py)."""

from __future__ import annotations

from typing import Protocol

from wal_sink.protocol.stop_signal import StopSignal


class SinkPath(Protocol):
    """How one attempt of the job applies what it stages: a committer thread behind
    foreachBatch (committer_path.py), or a follower process behind
    format("wal_sink") (follower_path.py)."""

    def check(self) -> None:
        """Raise what stopped the applying side, if anything did."""

    def finish(self, stop: StopSignal) -> int:
        """The queries ended: apply what is staged — all of it when draining, for up
        to ``job.stop_timeout`` once stopping, nothing more at stop now — and
        return the exit code."""

    def cause(self, error: BaseException) -> BaseException:
        """What made the query fail, for the restart decision."""

    def close(self) -> None:
        """Release what the attempt holds; what is not applied stays staged."""


class Queries(Protocol):
    """The Spark side of one attempt: the sink's query through the attempt's
    SinkPath and, for a parsed source, the parse-error query beside it."""

    def start(self) -> None:
        """Read the source; refuse a stream the target cannot take as configured;
        take the lease, check the checkpoint and recover (the path's own start);
        then start the queries."""

    def running(self, seconds: float) -> bool:
        """Wait up to ``seconds`` on each query; whether any still runs. Raises
        what failed a query."""

    def stop_between_batches(self) -> None:
        """Stopping: let the batch in progress end, then stop the queries."""

    def stop(self) -> None:
        """Stop the queries still running."""
