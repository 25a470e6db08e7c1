"""Housekeeping: the purges the sink schedules itself ([housekeeping]), on a real
WAL and a real MariaDB. A run removes batches acked long enough ago and their ack
rows, never an unacked batch nor the newest ack row; a failed run is tried again
at the next interval while the follower goes on; a run killed between the WAL and
the ack rows leaves a sink that starts, applies and purges again, nothing lost."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import time
from decimal import Decimal

import pyarrow as pa
import pytest

from tests.helpers import (
    REPO,
    WAL_SINK,
    FollowerThread,
    fresh_table,
    stage_rows,
    write_config,
)
from wal_sink import faults
from wal_sink.config import load_config
from wal_sink.metrics import SinkMetrics
from wal_sink.ops.housekeeping import Housekeeping, scheduled
from wal_sink.protocol.sink_instance import SinkInstance

SCHEMA = pa.schema([("k", pa.string()), ("amount", pa.decimal128(12, 2))])
EVERY_SECOND = """
[housekeeping]
interval = "1s"
acked_batches_older_than = "0s"
"""


@pytest.fixture
def config_path(db, tmp_path):
    """Sink ``kept`` adding amounts into ``kept``, purging every second."""
    fresh_table(db, "kept")
    return write_config(tmp_path / "kept.toml", db, table="kept", sections=EVERY_SECOND)


def stage(config, *batch_ids: int) -> None:
    """Batch b adds b + 1 to key "a"."""
    for b in batch_ids:
        stage_rows(config, b, [{"k": "a", "amount": Decimal(b + 1)}], SCHEMA)


def in_wal(config) -> list[int]:
    sink = SinkInstance(config)
    try:
        return sorted(sink.wal.staged_batches())
    finally:
        sink.close()


def acked(db) -> list[int]:
    return [b for (b,) in db.rows("SELECT batch_id FROM wal_sink_ack ORDER BY 1")]


def runs(metrics: SinkMetrics, outcome: str) -> float:
    value = metrics.registry.get_sample_value(
        "wal_sink_housekeeping_runs_total", {"sink": "kept", "outcome": outcome}
    )
    return value or 0.0


def wait_until(check, what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_scheduled_run_with_unacked_batches_removes_only_old_acked_ones(
    config_path, db, caplog
):
    config = load_config(config_path)
    stage(config, 0, 1, 2)
    sink = SinkInstance(config)
    committer = sink.start()
    committer.apply(0)
    committer.apply(1)  # batch 2 stays staged without an ack
    time.sleep(1.1)  # the ack rows' time is in whole seconds
    metrics = SinkMetrics("kept")
    housekeeping = Housekeeping(config, config.housekeeping, metrics)
    with caplog.at_level(logging.INFO, logger="wal_sink.housekeeping"):
        assert housekeeping.run_once() is not None
    sink.close()
    assert in_wal(config) == [2], "the unacked batch stays"
    assert acked(db) == [1], "the newest ack row stays"
    assert runs(metrics, "ok") == 1
    removed = metrics.registry.get_sample_value(
        "wal_sink_housekeeping_removed_total", {"sink": "kept", "what": "batches"}
    )
    assert removed == 2
    assert [r.getMessage() for r in caplog.records] == [
        "sink kept: housekeeping removed batches=2 ack_rows=1 quarantine_entries=0 "
        "tombstones=0 history_events=0 vacuum_files=0"
    ]


def test_the_ack_row_of_a_batch_purged_while_newest_goes_with_a_later_purge(
    config_path, db
):
    """A sink idle past the retention: its newest batch leaves the WAL and its ack
    row stays (the newest). A later run, purging newer batches, drops it too."""
    config = load_config(config_path)
    housekeeping = Housekeeping(config, config.housekeeping, SinkMetrics("kept"))
    stage(config, 0)
    sink = SinkInstance(config)
    sink.start().apply(0)
    time.sleep(1.1)  # the ack rows' time is in whole seconds
    assert housekeeping.run_once() is not None
    assert (in_wal(config), acked(db)) == ([], [0])
    stage(config, 1, 2)
    committer = sink.start()
    committer.apply(1)
    committer.apply(2)
    time.sleep(1.1)
    assert housekeeping.run_once() is not None
    sink.close()
    assert (in_wal(config), acked(db)) == ([], [2])
    assert db.rows("SELECT k, amount FROM kept") == [("a", Decimal("6"))]


def test_follower_with_housekeeping_purges_on_schedule_and_fails_without_stopping(
    config_path, db, monkeypatch, caplog
):
    config = load_config(config_path)
    stage(config, 0, 1)
    # The first run fails after the WAL, before the ack rows; the next ones pass.
    monkeypatch.setenv(faults.ENV, "purge.before_acks::raise-once")
    follower = FollowerThread(config_path)
    metrics = follower.follower.instance.metrics
    with caplog.at_level(logging.INFO, logger="wal_sink.housekeeping"):
        with scheduled(config, metrics):
            wait_until(lambda: runs(metrics, "failed") == 1, "a failed run")
            stage(config, 2)  # the follower goes on, and the next run purges it
            wait_until(lambda: in_wal(config) == [], "batch 2 applied and purged")
            wait_until(lambda: runs(metrics, "ok") >= 1, "an ok run")
    follower.drain()
    assert db.rows("SELECT k, amount FROM kept") == [("a", Decimal("6"))]
    assert acked(db)[-1] == 2, "the newest ack row stays"
    failed = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(failed) == 1
    assert failed[0].startswith(
        "sink kept: housekeeping failed (tried again in 1 s): injected fault at "
        "purge.before_acks, batch "
    )


def test_kill_in_a_scheduled_purge_then_restart_applies_and_purges_again(
    config_path, db, tmp_path
):
    config = load_config(config_path)
    stage(config, 0, 1, 2)
    env = {**os.environ, faults.ENV: "purge.before_acks"}  # SIGKILL of the group
    with open(tmp_path / "follow.log", "ab") as out:
        process = subprocess.Popen(
            [WAL_SINK, "-c", str(config_path), "follow"],
            cwd=REPO,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
        )
    try:
        assert process.wait(180) == -signal.SIGKILL
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    # Killed between the WAL and the ack rows: the batches that left the WAL have
    # their ack rows still (I5), which keeps them from being applied again.
    gone = {0, 1, 2} - set(in_wal(config))
    assert gone and gone <= set(acked(db))
    stage(config, 3)
    follower = FollowerThread(config_path)
    metrics = follower.follower.instance.metrics
    with scheduled(config, metrics):
        wait_until(lambda: in_wal(config) == [], "batch 3 applied and purged")
        wait_until(lambda: runs(metrics, "ok") >= 1, "an ok run")
    follower.drain()
    assert db.rows("SELECT k, amount FROM kept") == [("a", Decimal("10"))]
    assert acked(db)[-1] == 3, "the newest ack row stays"
