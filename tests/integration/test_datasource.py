"""``df.writeStream.format("wal_sink")`` in classic Spark, with the follower applying
behind it: found without a register call, exact totals with an ``add`` column, one
writer epoch per query run (what fencing relies on), a reset checkpoint refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from pyspark.errors import StreamingQueryException

from tests.helpers import (
    ADD_AMOUNT,
    LANDING_SCHEMA,
    FollowerThread,
    wait_for_lock_waits,
    write_config,
    write_landing,
)
from wal_sink.config import load_config
from wal_sink.protocol.stage_commit import StageCommitter
from wal_sink.wal.applied_position import AppliedPosition
from wal_sink.wal.task_files import wal_schema, write_task_file
from wal_sink.wal.writer_run import WriterRun


def ds_config(path: Path, db, sink_id: str, extra: str = "") -> Path:
    """Sink ``sink_id`` adding amounts into ds_totals; ``extra`` adds lines to
    [mysql]."""
    return write_config(
        path,
        db,
        table="ds_totals",
        sink_id=sink_id,
        wal="max_pending = 2",
        mysql=f"{ADD_AMOUNT}\n{extra}",
    )


@pytest.fixture
def target(db):
    for t in ("ds_totals", "wal_sink_ack", "wal_sink_lease", "wal_sink_outbox"):
        db.execute(f"DROP TABLE IF EXISTS {t}")
    db.execute(
        "CREATE TABLE ds_totals (k VARCHAR(32) PRIMARY KEY, amount DECIMAL(14,2), "
        "seq BIGINT) ENGINE=InnoDB"
    )
    return lambda: dict(db.rows("SELECT k, amount FROM ds_totals"))


def stream(
    spark, config: Path, landing: Path, checkpoint: Path, schema: str = LANDING_SCHEMA
) -> None:
    query = (
        spark.readStream.schema(schema)
        .option("maxFilesPerTrigger", 1)
        .json(str(landing))
        .writeStream.format("wal_sink")  # no register call: pyspark_wal_sink
        .option("config", str(config))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()


def test_format_wal_sink_with_the_follower_lands_exactly_once(
    spark, db, target, tmp_path
):
    config = ds_config(tmp_path / "ds.toml", db, "ds")
    landing = tmp_path / "landing"
    first = [[("a", "1.50", 1), ("b", "2.00", 1)], [("a", "3.25", 2)]] * 3
    expected = write_landing(landing, first)
    follower = FollowerThread(config)
    stream(spark, config, landing, tmp_path / "cp")
    follower.drain()
    assert target() == expected
    acks = [r[0] for r in db.rows("SELECT batch_id FROM wal_sink_ack ORDER BY 1")]
    assert acks == list(range(6))
    assert AppliedPosition(str(tmp_path / "wal")).read() == 5
    wal = DeltaTable(str(tmp_path / "wal"))
    assert wal.transaction_version("ds:writer") == 1, "one epoch for the whole run"

    # The next run of the query takes a new epoch; its batches add exactly once.
    more = [[("b", "0.25", 3)], [("c", "9.00", 4)]]
    (landing / "more").mkdir()
    for k, v in write_landing(landing / "more", more).items():
        expected[k] = expected.get(k, Decimal(0)) + v
    for f in sorted((landing / "more").iterdir()):
        f.rename(landing / f"z{f.name}")
    follower = FollowerThread(config)
    stream(spark, config, landing, tmp_path / "cp")
    follower.drain()
    assert target() == expected
    assert DeltaTable(str(tmp_path / "wal")).transaction_version("ds:writer") == 2


ROUTED = """
[sink]
id = "routed"
[wal]
path = "{wal}"
[mysql]
url = "{url}"
route_column = "kind"
auto_create = true
[mysql.tables.ds_left]
route = "L"
key = ["k"]
columns = ["k", "amount"]
merge = {{ amount = "add" }}
[mysql.tables.ds_right]
route = "R"
key = ["k"]
columns = ["k", "seq"]
"""


def test_format_wal_sink_routes_to_tables_the_follower_creates(spark, db, tmp_path):
    """Several tables behind the data source, whose Spark side has no MySQL: the
    follower creates both tables (mysql.auto_create) from the WAL's schema before
    its first batch, then applies each batch to both in one transaction, a row
    routed nowhere set aside."""
    for t in ("ds_left", "ds_right", "wal_sink_ack", "wal_sink_ack_tables"):
        db.execute(f"DROP TABLE IF EXISTS {t}")
    config = tmp_path / "routed.toml"
    config.write_text(ROUTED.format(wal=tmp_path / "wal", url=db.url))
    landing = tmp_path / "landing"
    landing.mkdir()
    batches = [
        [("L", "a", "1.50", 1), ("R", "a", None, 1), ("X", "z", None, 9)],
        [("L", "a", "2.25", 2), ("R", "a", None, 2), ("R", "b", None, 5)],
    ]
    for i, rows in enumerate(batches):
        path = landing / f"part-{i}.json"
        keys = ("kind", "k", "amount", "seq")
        path.write_text("".join(json.dumps(dict(zip(keys, r))) + "\n" for r in rows))
        os.utime(path, (1_700_000_000 + i, 1_700_000_000 + i))
    follower = FollowerThread(config)
    schema = "kind STRING, k STRING, amount DECIMAL(12,2), seq INT"
    stream(spark, config, landing, tmp_path / "cp", schema)
    follower.drain()
    assert db.rows("SELECT k, amount FROM ds_left") == [("a", Decimal("3.75"))]
    assert db.rows("SELECT k, seq FROM ds_right ORDER BY k") == [("a", 2), ("b", 5)]
    counts = db.rows(
        "SELECT batch_id, table_name, row_count, quarantined FROM wal_sink_ack_tables"
        " WHERE sink_id = 'routed' ORDER BY 1, 2"
    )
    assert counts == [
        (0, "", 0, 1),
        (0, "ds_left", 1, 0),
        (0, "ds_right", 1, 0),
        (1, "ds_left", 1, 0),
        (1, "ds_right", 2, 0),
    ]


def test_a_reset_checkpoint_is_refused_by_the_data_source(spark, db, target, tmp_path):
    from wal_sink.spark import WalSinkDataSource

    spark.dataSource.register(WalSinkDataSource)  # as found, registered by hand
    config = ds_config(tmp_path / "reset.toml", db, "reset")
    landing = tmp_path / "landing"
    expected = write_landing(landing, [[("a", "1.00", 1)], [("b", "2.00", 2)]])
    follower = FollowerThread(config)
    stream(spark, config, landing, tmp_path / "cp")
    follower.drain()
    with pytest.raises(StreamingQueryException, match="reset or replaced"):
        stream(spark, config, landing, tmp_path / "new-checkpoint")
    assert DeltaTable(str(tmp_path / "wal")).transaction_version("reset") == 1
    assert target() == expected


def test_follow_refuses_a_wal_behind_the_ack_table_with_one_line(db, target, tmp_path):
    """The WAL was replaced (or the config points at another one) while the ack
    table knows batch 3 applied: new batches would be skipped as applied."""
    config = ds_config(tmp_path / "replaced.toml", db, "replaced")
    cli = str(Path(sys.executable).with_name("wal-sink"))
    assert subprocess.run([cli, "-c", str(config), "init-db"]).returncode == 0
    db.execute(
        "INSERT INTO wal_sink_ack (sink_id, batch_id, row_count, deleted_count, "
        "quarantined, epoch, committed_at) VALUES ('replaced', 3, 1, 0, 0, 1, NOW())"
    )
    done = subprocess.run(
        [cli, "-c", str(config), "follow"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    last = done.stderr.splitlines()[-1]
    assert last.startswith("error: ") and "Traceback" not in done.stderr, done.stderr
    assert "has staged only up to None: it was replaced" in last


def test_a_query_without_the_config_option_fails_with_one_line(spark, tmp_path):
    landing = tmp_path / "landing"
    write_landing(landing, [[("a", "1.00", 1)]])
    query = (
        spark.readStream.schema(LANDING_SCHEMA)
        .json(str(landing))
        .writeStream.format("wal_sink")
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(availableNow=True)
        .start()
    )
    with pytest.raises(StreamingQueryException) as failed:
        query.awaitTermination()
    assert 'ConfigError: format("wal_sink") needs .option("config"' in str(failed.value)


def test_the_follower_rides_out_a_failing_read_of_the_log(
    db, target, tmp_path, monkeypatch
):
    """An I/O error reading the WAL's log (an object store briefly down) is retried
    at the next polls, within the outage budget: the follower goes on."""
    monkeypatch.setenv("WAL_SINK_FAULT", "follow.poll::eio-once")
    config = ds_config(tmp_path / "flaky.toml", db, "flaky")
    follower = FollowerThread(config)
    sink = load_config(config)
    schema = wal_schema(pa.schema([("k", pa.string()), ("amount", pa.int64())]))
    run = WriterRun("flaky", "run")
    for batch_id in range(3):
        rows = pa.record_batch([pa.array(["a", "b"]), pa.array([1, 2])], schema)
        task = write_task_file(
            sink.wal_path, sink.storage, batch_id, "a", 0, [rows], schema
        )
        StageCommitter(sink, run).commit(batch_id, [task], schema)
    follower.drain()
    assert target() == {"a": Decimal(3), "b": Decimal(6)}
    assert follower.follower.instance.metrics.retries._value.get() >= 1


def test_a_draining_follower_applies_every_staged_batch_and_stop_now_leaves_them(
    db, target, tmp_path
):
    """Three batches staged, one transaction each; MySQL holds the first behind a
    row lock while the follower is told to stop: drained, all three are applied;
    stopped at once, the two behind it stay staged."""
    config = ds_config(tmp_path / "drain.toml", db, "drain", "max_transaction_rows = 1")
    config.write_text(config.read_text().replace("max_pending = 2", "max_pending = 9"))
    sink = load_config(config)
    schema = wal_schema(pa.schema([("k", pa.string()), ("amount", pa.int64())]))
    db.execute("INSERT INTO ds_totals (k, amount) VALUES ('a', 0)")

    def stage(batch_id: int) -> None:
        rows = pa.record_batch([pa.array(["a"]), pa.array([1])], schema)
        task = write_task_file(
            sink.wal_path, sink.storage, batch_id, "a", 0, [rows], schema
        )
        StageCommitter(sink, WriterRun("drain", "run")).commit(batch_id, [task], schema)

    for now, first in ((False, 0), (True, 3)):
        with db.connect() as lock, lock.cursor() as cur:
            cur.execute("BEGIN")
            cur.execute("SELECT * FROM ds_totals WHERE k = 'a' FOR UPDATE")
            follower = FollowerThread(config)
            assert follower.follower.following.wait(60), "past its start-up"
            for batch_id in range(first, first + 3):
                stage(batch_id)
            wait_for_lock_waits(db)  # the follower is blocked applying the first
            if now:
                follower.follower.stop_now()
                follower.thread.join(10)  # it returns without waiting for MySQL
                assert not follower.thread.is_alive()
            else:
                follower.follower.stop(drain=True)
            lock.rollback()
        follower.thread.join(60)
        assert not follower.thread.is_alive() and follower.failure is None
        # the transaction under way when it stopped commits first
        assert follower.follower.instance.close(timeout=30)
    acked = [r[0] for r in db.rows("SELECT batch_id FROM wal_sink_ack ORDER BY 1")]
    assert acked == [0, 1, 2, 3], "drained: 0..2; stopped at once: 3 only"
    assert target() == {"a": Decimal(4)}


def threads_since(before: set[threading.Thread]) -> set[str]:
    return {t.name.rstrip("_0123456789") for t in set(threading.enumerate()) - before}


@contextmanager
def follower_behind_a_row_lock(db, config: Path):
    """A follower past its start-up, while another connection holds row 'a' of
    ds_totals locked in its transaction: (the follower's thread, that connection,
    whose rollback lets the committer on)."""
    db.execute("INSERT INTO ds_totals (k, amount) VALUES ('a', 0)")
    with db.connect() as lock, lock.cursor() as cur:
        cur.execute("BEGIN")
        cur.execute("SELECT * FROM ds_totals WHERE k = 'a' FOR UPDATE")
        follower = FollowerThread(config)
        assert follower.follower.following.wait(60), "past its start-up"
        yield follower, lock


def stage_one_to_a(sink, writer: str, batch_id: int) -> None:
    """Stage batch ``batch_id`` as the data source does: one row adding 1 to 'a'."""
    schema = wal_schema(pa.schema([("k", pa.string()), ("amount", pa.int64())]))
    rows = pa.record_batch([pa.array(["a"]), pa.array([1])], schema)
    task = write_task_file(
        sink.wal_path, sink.storage, batch_id, "a", 0, [rows], schema
    )
    StageCommitter(sink, WriterRun(writer, "run")).commit(batch_id, [task], schema)


def test_close_releases_nothing_under_a_committer_still_in_its_transaction(
    db, target, tmp_path, caplog
):
    """Told to stop now while MySQL holds its transaction behind a row lock, the
    follower returns; closing the sink then leaves the committer's connection and
    threads to it (one line says so). Once the transaction ended, close ends the
    committer thread and the prefetch thread and releases the connections."""
    before = set(threading.enumerate())
    config = ds_config(tmp_path / "close.toml", db, "close")
    with follower_behind_a_row_lock(db, config) as (follower, lock):
        stage_one_to_a(load_config(config), "close", 0)
        wait_for_lock_waits(db)  # the committer is blocked applying batch 0
        follower.follower.stop_now()
        follower.thread.join(10)
        assert not follower.thread.is_alive() and follower.failure is None
        instance = follower.follower.instance
        assert not instance.close()
        assert "the committer is still in a transaction" in caplog.text
        assert instance.engine.pool.checkedout() == 1, "its connection, undisposed"
        assert threads_since(before) == {
            "wal-sink-committer-close",
            "wal-sink-prefetch",
        }
        lock.rollback()
    assert instance.close(timeout=30)
    assert threads_since(before) == set()
    acked = [r[0] for r in db.rows("SELECT batch_id FROM wal_sink_ack")]
    assert acked == [0] and target() == {"a": Decimal(1)}, "its COMMIT went through"


def test_a_stop_while_draining_gives_up_after_the_stop_timeout(db, target, tmp_path):
    """``--available-now`` tells the follower to drain; a SIGTERM meanwhile tells it
    to stop: what is staged is then applied for up to job.stop_timeout, no longer,
    as on the foreachBatch path."""
    config = write_config(
        tmp_path / "sigdrain.toml",
        db,
        table="ds_totals",
        wal="max_pending = 9",
        mysql=f"{ADD_AMOUNT}\nmax_transaction_rows = 1",
        job='stop_timeout = "2s"',
    )
    sink = load_config(config)
    with follower_behind_a_row_lock(db, config) as (follower, lock):
        for batch_id in (0, 1):
            stage_one_to_a(sink, "sigdrain", batch_id)
        follower.follower.stop(drain=True)
        wait_for_lock_waits(db)  # draining, blocked applying batch 0
        follower.follower.stop()
        follower.thread.join(20)  # within the stop timeout, MySQL still blocked
        assert not follower.thread.is_alive() and follower.failure is None
        lock.rollback()
    assert follower.follower.instance.close(timeout=30)
    acked = [r[0] for r in db.rows("SELECT batch_id FROM wal_sink_ack")]
    assert acked == [0], "the group under way commits; batch 1 stays staged"


def test_format_wal_sink_keeps_a_history_the_follower_creates(spark, db, tmp_path):
    """stored_as_scd_type = 2 behind the data source: the follower creates the
    history from the WAL's schema, and a late file's record splits a version."""
    for t in ("ds_history", "ds_history_events", "wal_sink_ack"):
        db.execute(f"DROP TABLE IF EXISTS {t}")
    history = 'version_column = "seq"\nstored_as_scd_type = 2\nauto_create = true'
    config = write_config(
        tmp_path / "history.toml", db, table="ds_history", mysql=history
    )
    landing = tmp_path / "landing"
    write_landing(landing, [[("a", "1.00", 1)], [("a", "2.00", 3)], [("a", "1.50", 2)]])
    follower = FollowerThread(config)
    stream(spark, config, landing, tmp_path / "cp")
    follower.drain()
    assert db.rows(
        "SELECT k, amount, __START_AT, __END_AT FROM ds_history ORDER BY __START_AT"
    ) == [
        ("a", Decimal("1.00"), 1, 2),
        ("a", Decimal("1.50"), 2, 3),
        ("a", Decimal("2.00"), 3, None),
    ]
