"""The job runs the scheduled purges of [housekeeping] from its start until it
closes: its committer side (``job.writer = "foreach_batch"``) in-process, over a
real Spark session, WAL and MariaDB; its follower process (``job.writer =
"datasource"``) as the job starts it, over batches staged as the data source
stages them."""

from __future__ import annotations

import time
from decimal import Decimal

import pyarrow as pa

from tests.helpers import JOB, fresh_table, settle, stage_rows, write_config
from wal_sink.config import load_config
from wal_sink.job.follower_child import FollowerChild
from wal_sink.metrics import SinkMetrics
from wal_sink.protocol.stop_signal import StopSignal
from wal_sink.spark.foreach_batch_job import ForeachBatchPath

SCHEMA = "k STRING, amount DECIMAL(12,2)"


def test_job_path_with_housekeeping_purges_applied_batches_until_closed(
    spark, db, tmp_path
):
    fresh_table(db, "kept_job")
    config = load_config(
        write_config(
            tmp_path / "kept_job.toml",
            db,
            table="kept_job",
            job=JOB,
            sections='[housekeeping]\ninterval = "1s"\nacked_batches_older_than = "0s"',
        )
    )
    metrics = SinkMetrics("kept_job")
    path = ForeachBatchPath(config, StopSignal(), metrics)
    frame = spark.createDataFrame([("a", Decimal(1))], SCHEMA)
    path.start(spark, frame)
    for b in range(3):
        path.runner(frame, b)
    settle(path.sink)
    deadline = time.monotonic() + 60
    while True:
        path.sink.wal.refresh()
        if not path.sink.wal.staged_batches():
            break
        assert time.monotonic() < deadline, "the applied batches stay in the WAL"
        time.sleep(0.2)
    path.close()
    ok = metrics.registry.get_sample_value(
        "wal_sink_housekeeping_runs_total", {"sink": "kept_job", "outcome": "ok"}
    )
    assert ok and ok >= 1
    assert db.rows("SELECT k, amount FROM kept_job") == [("a", Decimal("3"))]
    # The newest ack row stays (a run that purged batch 0 while it was the newest
    # left its ack row too: see the docs' Housekeeping section).
    assert db.rows("SELECT MAX(batch_id) FROM wal_sink_ack") == [(2,)]


def test_the_jobs_follower_process_with_housekeeping_purges_applied_batches(
    db, tmp_path
):
    """With job.writer = "datasource" the follower process the job starts applies
    the staged batches and purges them once acked; stop ends it with 0."""
    fresh_table(db, "kept_ds")
    path = write_config(
        tmp_path / "kept_ds.toml",
        db,
        table="kept_ds",
        job=JOB + '\nwriter = "datasource"',
        sections='[housekeeping]\ninterval = "1s"\nacked_batches_older_than = "0s"',
    )
    config = load_config(path)
    schema = pa.schema([("k", pa.string()), ("amount", pa.decimal128(12, 2))])
    for b in range(3):
        stage_rows(config, b, [{"k": "a", "amount": Decimal(1)}], schema)
    child = FollowerChild(path)
    try:
        deadline = time.monotonic() + 60
        while acked(db) != [(2,)]:  # 0 and 1 purged with their ack rows
            assert child.poll() is None, "the follower exited"
            assert time.monotonic() < deadline, "the applied batches stay"
            time.sleep(0.2)
        child.command("stop")
        assert child.wait(30) == 0
    finally:
        child.kill()
    assert db.rows("SELECT k, amount FROM kept_ds") == [("a", Decimal("3"))]
    assert db.rows("SELECT MAX(batch_id) FROM wal_sink_ack") == [(2,)]


def acked(db) -> list[tuple]:
    """The batches with an ack row (none while the follower makes the table)."""
    if not db.rows("SHOW TABLES LIKE 'wal_sink_ack'"):
        return []
    return db.rows("SELECT batch_id FROM wal_sink_ack ORDER BY 1")
