"""Fencing (I6): one lease row per sink, whose epoch grows by one at every start.

An instance takes the lease at start and remembers its epoch. Every batch
transaction locks the lease row and compares epochs, so a zombie from before the
latest start cannot commit: its epoch is smaller and it gets ``FencedError``.
"""

from __future__ import annotations

import os
import socket

from sqlalchemy import Connection, Engine, Table, func, select
from sqlalchemy.dialects.mysql import insert

from wal_sink.errors import FencedError


def holder_name() -> str:
    """Who holds the lease, for operators: host and process id."""
    return f"{socket.gethostname()}:{os.getpid()}"


def acquire(engine: Engine, lease: Table, sink_id: str) -> int:
    """Take the lease for ``sink_id`` and return the new epoch (previous + 1)."""
    stmt = insert(lease).values(
        sink_id=sink_id, epoch=1, holder=holder_name(), acquired_at=func.now(6)
    )
    stmt = stmt.on_duplicate_key_update(
        epoch=lease.c.epoch + 1, holder=stmt.inserted.holder, acquired_at=func.now(6)
    )
    with engine.begin() as conn:
        conn.execute(stmt)
        return conn.execute(
            select(lease.c.epoch).where(lease.c.sink_id == sink_id)
        ).scalar_one()


def current_epoch(
    conn: Connection, lease: Table, sink_id: str, *, lock: bool
) -> int | None:
    """Read the stored epoch; ``lock`` takes the row lock until the transaction ends."""
    query = select(lease.c.epoch).where(lease.c.sink_id == sink_id)
    if lock:
        query = query.with_for_update()
    return conn.execute(query).scalar_one_or_none()


def check(
    conn: Connection,
    lease: Table,
    sink_id: str,
    epoch: int,
    *,
    lock: bool,
    batch_id: int | None = None,
) -> None:
    """Raise FencedError unless ``epoch`` is still the stored one."""
    stored = current_epoch(conn, lease, sink_id, lock=lock)
    if stored != epoch:
        raise FencedError(
            f"lease epoch {epoch} is no longer current (stored: {stored}); "
            "a newer instance of this sink took over, so this one stops",
            sink_id=sink_id,
            batch_id=batch_id,
        )
