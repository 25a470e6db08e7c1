"""Fault injection for crash tests: kill this process hard at a named protocol step.

Set ``WAL_SINK_FAULT=POINT[:BATCH[:ACTION]]`` (e.g. ``commit.before_commit:1``). When
the protocol reaches POINT for BATCH (any batch if empty), ACTION happens: ``kill``
(default) sends SIGKILL to the whole process group — the Python driver and its Spark
JVM die as in a power cut; run the writer in its own session
(``start_new_session=True``). ``raise`` raises ``InjectedFault`` every time,
``raise-once`` only the first time in this process (for restart strategies);
``lost-once`` raises, once, the lost-connection error (2013) a client sees when the
reply to COMMIT never arrives; ``eio-once`` raises, once, the I/O error (EIO) a flaky
disk or mount gives. Unset, every hook is a no-op.

Points: ``stage.during`` (executors are writing the batch's Parquet files),
``stage.before_commit`` (the attempt's files are written, the delta-rs commit is not
made), ``stage.after`` (committed), ``commit.before_commit``, ``commit.after_commit``,
``wal.read`` (the committer opens a staged file of the batch), ``follow.poll`` (the
follower reads the next version of the WAL's log; BATCH is that version),
``retry.before_commit`` and ``retry.after_commit`` (``wal-sink quarantine retry``'s
transaction of a batch's entries), ``repair.before_commit`` (``verify --repair``'s
transaction of repair BATCH, its rows written and acked), ``purge.before_acks`` (a
purge removed its batches from the WAL and not yet their ack rows; BATCH is the
newest it removed), ``history.before_fill`` (a start added columns to an events
table and has not filled them from the history yet; BATCH is 0).
"""

from __future__ import annotations

import errno
import functools
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

ENV = "WAL_SINK_FAULT"
POINTS = (
    "stage.during",
    "stage.before_commit",
    "stage.after",
    "commit.before_commit",
    "commit.after_commit",
    "wal.read",
    "retry.before_commit",
    "retry.after_commit",
    "follow.poll",
    "repair.before_commit",
    "purge.before_acks",
    "history.before_fill",
)


ACTIONS = ("kill", "raise", "raise-once", "lost-once", "eio-once")
_raised: set[str] = set()


class InjectedFault(RuntimeError):
    """Raised by the ``raise`` actions; not a WalSinkError, so restarts apply."""


def _armed(point: str, batch_id: int) -> str | None:
    """The action to take at ``point`` for ``batch_id``, or None."""
    if point not in POINTS:
        raise ValueError(f"{point!r} is not a fault point ({', '.join(POINTS)})")
    spec = os.environ.get(ENV)
    if not spec:
        return None
    name, batch, action = _parsed(spec)
    if name == point and (batch is None or batch == batch_id):
        return action
    return None


@functools.lru_cache(maxsize=8)
def _parsed(spec: str) -> tuple[str, int | None, str]:
    """``POINT[:BATCH[:ACTION]]`` as (point, batch or None for any, action), read
    once per value: the data path asks at every file it reads."""
    name, batch, action = (spec.split(":") + ["", ""])[:3]
    action = action or "kill"
    if name not in POINTS or action not in ACTIONS or not (batch or "0").isdigit():
        raise ValueError(
            f"{ENV}={spec!r}: use POINT[:BATCH[:ACTION]] with POINT in "
            f"{', '.join(POINTS)} and ACTION in {', '.join(ACTIONS)}"
        )
    return name, int(batch) if batch else None, action


def _kill() -> None:
    os.killpg(os.getpgrp(), signal.SIGKILL)


def hit(point: str, batch_id: int) -> None:
    """Act here if the environment asks for a fault at ``point`` for ``batch_id``."""
    action = _armed(point, batch_id)
    if action == "kill":
        _kill()
    elif action == "raise" or (action == "raise-once" and point not in _raised):
        _raised.add(point)
        raise InjectedFault(f"injected fault at {point}, batch {batch_id}")
    elif action == "lost-once" and point not in _raised:
        _raised.add(point)
        import pymysql
        from sqlalchemy.exc import OperationalError

        raise OperationalError(
            "COMMIT",
            None,
            pymysql.err.OperationalError(
                2013, "Lost connection to MySQL server during query (injected)"
            ),
        )
    elif action == "eio-once" and point not in _raised:
        _raised.add(point)
        raise OSError(errno.EIO, f"Input/output error (injected at {point})")


def watch_stage(partition_dir: str, batch_id: int) -> Callable[[], None]:
    """Arm ``stage.during``: die as soon as a Parquet file of the batch appears
    anywhere under its partition directory (local WALs), while executors write.

    Returns what a writer that writes the batch's file itself (the driver, in one
    go) calls once it is written: armed, it waits for the watch to see the file,
    which the commit right after would otherwise race."""
    if _armed("stage.during", batch_id) != "kill":
        return _no_wait
    directory = Path(partition_dir)

    def watch() -> None:
        while True:
            if directory.is_dir() and any(directory.rglob("*.parquet")):
                _kill()
            time.sleep(0.005)

    threading.Thread(target=watch, daemon=True, name="wal-sink-fault").start()
    return _wait_for_the_watch


def _no_wait() -> None:
    pass


def _wait_for_the_watch() -> None:
    time.sleep(60)  # the watch kills the process group within milliseconds
