"""MySQL's named locks (``GET_LOCK``): two sinks starting on one database take turns
at the DDL they run before any batch (a tombstone table's set-up, a target created
or evolved), so neither meets the other's half-done table."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Connection, text

from wal_sink.errors import TransientError

LOCK_SECONDS = 60
"""How long a start waits for another sink's DDL."""
NAME_LENGTH = 64
"""MySQL's longest lock name."""


@contextmanager
def named_lock(conn: Connection, name: str, what: str) -> Iterator[None]:
    """Hold the lock ``name`` (per database) on ``conn`` while the block runs, and
    commit what the block did before releasing it.

    Raises:
        TransientError: another session held it for LOCK_SECONDS (a start retries
            within its outage budget).
    """
    lock = conn.execute(
        text("SELECT LEFT(CONCAT(DATABASE(), '/', :n), :l)"),
        {"n": name, "l": NAME_LENGTH},
    ).scalar_one()
    got = conn.execute(
        text("SELECT GET_LOCK(:l, :s)"), {"l": lock, "s": LOCK_SECONDS}
    ).scalar_one()
    if got != 1:
        raise TransientError(
            f"another sink held the lock on {what} ({lock!r}) for {LOCK_SECONDS} s"
        )
    try:
        yield
        if conn.in_transaction():
            conn.commit()
    finally:
        conn.execute(text("SELECT RELEASE_LOCK(:l)"), {"l": lock})
