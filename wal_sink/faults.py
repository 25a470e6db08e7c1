"""Fault injection for crash tests: kill this process hard at a named protocol step.

Set ``WAL_SINK_FAULT=POINT[:BATCH]`` (e.g. ``commit.before_commit:1``). When the
protocol reaches POINT for BATCH (any batch if omitted), the whole process group is
sent SIGKILL — the Python driver and its Spark JVM die as in a power cut. Run the
writer in its own session (``start_new_session=True``). Unset, every hook is a no-op.

Points: ``stage.during`` (a WAL Parquet file of the batch exists, the Delta commit
does not yet), ``stage.after``, ``commit.before_commit``, ``commit.after_commit``.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

ENV = "WAL_SINK_FAULT"
POINTS = ("stage.during", "stage.after", "commit.before_commit", "commit.after_commit")


def _armed(point: str, batch_id: int) -> bool:
    spec = os.environ.get(ENV)
    if not spec:
        return False
    name, _, batch = spec.partition(":")
    if name not in POINTS:
        raise ValueError(f"{ENV}={spec!r}: unknown point; use one of {', '.join(POINTS)}")
    return name == point and (not batch or int(batch) == batch_id)


def _kill() -> None:
    os.killpg(os.getpgrp(), signal.SIGKILL)


def hit(point: str, batch_id: int) -> None:
    """Die here if the environment asks for a crash at ``point`` for ``batch_id``."""
    if _armed(point, batch_id):
        _kill()


def watch_stage(wal_path: str, partition_dir: str, batch_id: int) -> None:
    """Arm ``stage.during``: die as soon as a Parquet file of the batch appears.

    Delta writes data files into the partition directory before it writes the commit
    JSON, so dying then leaves written-but-uncommitted files, as a real crash would.
    """
    if not _armed("stage.during", batch_id):
        return
    directory = Path(wal_path) / partition_dir

    def watch() -> None:
        while True:
            if directory.is_dir() and any(directory.glob("*.parquet")):
                _kill()
            time.sleep(0.005)

    threading.Thread(target=watch, daemon=True, name="wal-sink-fault").start()
