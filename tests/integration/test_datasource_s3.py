"""The data source's pieces with the WAL on S3 (s3proxy, on loopback): task files
written through pyarrow's S3 filesystem with their exact sizes, the driver's
commit, the follower tailing the log and applying to MariaDB, the applied position
it publishes and the backpressure that reads it. No Spark: the executors' and the
driver's code run in the test."""

from __future__ import annotations

import threading
import time
from decimal import Decimal

import pyarrow as pa
import pytest

from tests.helpers import FollowerThread, s3_config, s3_storage
from wal_sink.config import load_config
from wal_sink.protocol import stage_commit
from wal_sink.protocol.stage_commit import StageCommitter
from wal_sink.wal.applied_position import AppliedPosition
from wal_sink.wal.task_files import wal_schema, write_task_file
from wal_sink.wal.writer_run import WriterRun

pytestmark = pytest.mark.s3
SCHEMA = wal_schema(pa.schema([("k", pa.string()), ("amount", pa.decimal128(12, 2))]))


def test_data_source_and_follower_on_s3_land_exactly_once(s3, bucket, db, tmp_path):
    for t in ("s3ds_totals", "wal_sink_ack", "wal_sink_lease", "wal_sink_outbox"):
        db.execute(f"DROP TABLE IF EXISTS {t}")
    db.execute(
        "CREATE TABLE s3ds_totals (k VARCHAR(16) PRIMARY KEY, amount DECIMAL(16,2)) "
        "ENGINE=InnoDB"
    )
    path = s3_config(
        tmp_path / "s3ds.toml", db, s3, f"{bucket}/wal", table="s3ds_totals"
    )
    config = load_config(path)
    stage_commit._writers.clear()
    follower = FollowerThread(path)
    run = WriterRun(config.sink.id, "run")
    fs, root = s3_storage(s3).filesystem(config.wal_path)
    expected: dict[str, Decimal] = {}
    started = time.monotonic()
    for batch_id in range(6):
        tasks = []
        for partition in range(2):
            keys = [f"k{(batch_id + partition + i) % 4}" for i in range(5)]
            amounts = [Decimal(batch_id * 10 + i) / 4 for i in range(5)]
            rows = pa.record_batch(
                [pa.array(keys), pa.array(amounts, pa.decimal128(12, 2))], SCHEMA
            )
            task = write_task_file(
                config.wal_path,
                config.storage,
                batch_id,
                "a",
                partition,
                [rows],
                SCHEMA,
            )
            info = fs.get_file_info(f"{root}/{task.file.path}")
            assert info.size == task.file.size, "the exact byte count"
            tasks.append(task)
            for k, a in zip(keys, amounts):
                expected[k] = expected.get(k, Decimal(0)) + a
        StageCommitter(config, run, "/cp").commit(batch_id, tasks, SCHEMA)
    staging = time.monotonic() - started
    follower.drain()
    got = dict(db.rows("SELECT k, amount FROM s3ds_totals"))
    assert got == expected
    assert AppliedPosition(config.wal_path, config.storage).read() == 5
    print(f"6 batches staged on S3 in {staging:.1f}s with max_pending 2")


def test_position_on_s3_releases_a_waiting_commit(s3, bucket, db, tmp_path):
    path = s3_config(tmp_path / "s3wait.toml", db, s3, f"{bucket}/wal", table="unused")
    config = load_config(path)
    stage_commit._writers.clear()
    run = WriterRun(config.sink.id, "run")
    one = pa.record_batch(
        [pa.array(["a"]), pa.array([Decimal(1)], pa.decimal128(12, 2))], SCHEMA
    )

    def stage(batch_id: int):
        task = write_task_file(
            config.wal_path, config.storage, batch_id, "a", 0, [one], SCHEMA
        )
        return StageCommitter(config, run, "/cp").commit(batch_id, [task], SCHEMA)

    stage(0)
    stage(1)
    position = AppliedPosition(config.wal_path, config.storage)
    threading.Timer(1.0, position.publish, (0, 1)).start()
    outcome = stage(2)  # wal.max_pending = 2 batches wait: this one waits
    assert outcome.staged and outcome.waited_s >= 0.9
