"""Errors of wal_sink: one root, split into transient (retry the batch) and terminal.

Each error builds its one-line message in ``__init__`` and keeps ``sink_id``,
``batch_id`` and ``table`` as attributes, so logs and the CLI can show them without
parsing text.
"""

from __future__ import annotations


def first_line(obj: object) -> str:
    text = str(obj).strip()
    return text.splitlines()[0] if text else type(obj).__name__


class WalSinkError(Exception):
    """Root of every error this package raises on purpose."""

    def __init__(
        self,
        message: str,
        *,
        sink_id: str | None = None,
        batch_id: int | None = None,
        table: str | None = None,
    ) -> None:
        self.sink_id = sink_id
        self.batch_id = batch_id
        self.table = table
        where = []
        if sink_id is not None:
            where.append(f"sink {sink_id!r}")
        if batch_id is not None:
            where.append(f"batch {batch_id}")
        if table is not None:
            where.append(f"table {table!r}")
        prefix = f"{', '.join(where)}: " if where else ""
        super().__init__(prefix + message)


class TransientError(WalSinkError):
    """The batch transaction may succeed if retried as a whole (deadlock, lost link)."""


class TerminalError(WalSinkError):
    """Retrying cannot help; the query must stop and say why."""


class ConfigError(TerminalError):
    """The configuration or environment is wrong; the message names the key."""


class FencedError(TerminalError):
    """A newer instance of this sink holds the lease; this one must stop (I6)."""


class CheckpointResetError(ConfigError):
    """The Spark checkpoint and what the WAL and ack table know disagree (I7): it
    was reset or replaced, or the WAL was lost or moved. The job refuses to start,
    as for a configuration error (exit 2)."""


class RetryStopped(TerminalError):
    """A stop was requested while waiting to retry; the work stays undone."""


class ReplayOrderError(TerminalError):
    """Replaying would apply a batch before earlier staged ones (I8)."""


class SetAsideRefused(TerminalError):
    """The batch is not the lowest staged batch without an ack."""


class StopRequested(WalSinkError):
    """The sink is stopping and takes no more batches; Spark plans this one again
    at the next start. Neither transient nor terminal: the job ends normally."""


class FollowerFailed(WalSinkError):
    """The job's follower process exited on a failure a restart may cure (its line
    is above)."""
