"""One test (at least) per invariant I1–I7 (docs/protocol.md lists those of I8 and
I9 too), against real MariaDB, Spark and Delta. Amounts use an ``add`` column so a
duplicate apply shows as a wrong total."""

from __future__ import annotations

from decimal import Decimal

import pytest
from pyspark.errors import StreamingQueryException

from tests.helpers import LANDING_SCHEMA, run_stream, settle, write_landing
from wal_sink import CheckpointResetError, FencedError, WalSink
from wal_sink.ops.purge import execute_purge, plan_purge
from wal_sink.spark.staging import stage
from wal_sink.wal.writer import WalWriter


@pytest.fixture
def target(db):
    """A fresh `totals` table; returns a reader of {k: amount}."""
    db.execute("DROP TABLE IF EXISTS totals")
    db.execute("DROP TABLE IF EXISTS wal_sink_ack")
    db.execute("DROP TABLE IF EXISTS wal_sink_lease")
    db.execute(
        "CREATE TABLE totals (k VARCHAR(32) PRIMARY KEY, amount DECIMAL(14,2), "
        "seq BIGINT) ENGINE=InnoDB"
    )
    return lambda: dict(db.rows("SELECT k, amount FROM totals"))


def acked(db) -> list[int]:
    return [
        r[0] for r in db.rows("SELECT batch_id FROM wal_sink_ack ORDER BY batch_id")
    ]


def frame(spark, rows):
    return spark.createDataFrame(rows, LANDING_SCHEMA)


BATCHES = [
    [("a", "1.50", 1), ("b", "2.00", 1)],
    [("a", "3.25", 2), ("c", "7.00", 2)],
    [("b", "0.75", 3), ("a", "10.00", 3), ("d", "1.00", 3)],
]


def test_stream_all_batches_applied_exactly(spark, db, target, make_config, tmp_path):
    """I1 no loss: every row of every committed batch is in MySQL."""
    config = make_config(merge={"amount": "add"}, checkpoint=tmp_path / "checkpoint")
    expected = write_landing(tmp_path / "landing", BATCHES)
    sink = WalSink(config)
    sink.recover(spark)
    run_stream(spark, sink, tmp_path / "landing", tmp_path / "checkpoint")
    assert target() == expected
    assert acked(db) == [0, 1, 2]
    assert db.rows("SELECT SUM(row_count) FROM wal_sink_ack")[0][0] == 7


def test_redelivered_and_recovered_batch_adds_once(spark, db, target, make_config):
    """I2 no duplicate effect: a batch delivered twice and recovered again adds once."""
    config = make_config(merge={"amount": "add"})
    sink = WalSink(config)
    df = frame(spark, [("a", Decimal("5.00"), 1), ("b", Decimal("1.00"), 1)])
    sink.foreach_batch(df, 0)
    sink.foreach_batch(df, 0)
    settle(sink)
    assert sink.committer.apply(0).applied is False
    restarted = WalSink(config)
    assert restarted.recover(spark) == []
    restarted.foreach_batch(df, 0)
    settle(restarted)
    assert target() == {"a": Decimal("5.00"), "b": Decimal("1.00")}
    assert acked(db) == [0]


def test_reader_during_commit_sees_nothing_until_commit(spark, db, target, make_config):
    """I3 atomic visibility: a concurrent reader sees none of the batch before
    COMMIT."""
    config = make_config(merge={"amount": "add"}, chunk_rows=250)
    sink = WalSink(config)
    sink.start()
    rows = [(f"k{i}", Decimal(1), i) for i in range(3000)]
    stage(frame(spark, rows).repartition(3), WalWriter(config.wal_path, "s1"), 0)
    seen: list[tuple[int, int, int]] = []

    def look(done: int, total: int) -> None:
        ((count,),) = db.rows("SELECT COUNT(*) FROM totals")
        ((acks,),) = db.rows("SELECT COUNT(*) FROM wal_sink_ack")
        seen.append((done, count, acks))

    result = sink.committer.apply(0, on_chunk=look)
    assert result.rows == 3000
    assert len(seen) >= 12, "the batch should span many chunks"
    assert all(count == 0 and acks == 0 for _, count, acks in seen), seen
    assert db.rows("SELECT COUNT(*) FROM totals")[0][0] == 3000


def test_redelivered_batch_applies_staged_content(spark, db, target, make_config):
    """I4 the WAL is immutable truth: Spark re-delivering batch 0 with other rows after
    a crash between stage and commit changes neither the WAL nor what is applied."""
    config = make_config(merge={"amount": "add"})
    first = WalSink(config)
    first.start()
    stage(
        frame(spark, [("a", Decimal("1.00"), 1)]), WalWriter(config.wal_path, "s1"), 0
    )
    # crash here: staged, never committed. The restarted query recomputes batch 0.
    restarted = WalSink(config)
    restarted.start()
    restarted.foreach_batch(frame(spark, [("z", Decimal("99.00"), 1)]), 0)
    settle(restarted)
    assert target() == {"a": Decimal("1.00")}
    batch = restarted.wal.staged_batch(0)
    content = [
        r for chunk in restarted.wal.read_batch(batch, 10) for r in chunk.to_pylist()
    ]
    assert content == [{"k": "a", "amount": Decimal("1.00"), "seq": 1}]


def test_purge_keeps_unacked_batches(spark, db, target, make_config):
    """I5 purge is safe: batches without an ack survive and are applied later."""
    config = make_config(merge={"amount": "add"})
    sink = WalSink(config)
    sink.start()
    for b in range(3):
        stage(
            frame(spark, [(f"k{b}", Decimal(b + 1), b)]),
            WalWriter(config.wal_path, "s1"),
            b,
        )
    sink.committer.apply(0)
    sink.committer.apply(2)
    plan = plan_purge(sink, before=3)
    assert plan.remove == (0, 2) and plan.kept_unacked == (1,)
    execute_purge(sink, plan)
    sink.wal.refresh()
    assert sorted(sink.wal.staged_batches()) == [1]
    assert [r.batch_id for r in WalSink(config).recover(spark)] == [1]
    assert target() == {"k0": Decimal(1), "k1": Decimal(2), "k2": Decimal(3)}


def test_zombie_cannot_stage_or_commit_after_takeover(spark, db, target, make_config):
    """I6 fencing: once a newer instance took the lease, the old one can do nothing."""
    config = make_config(merge={"amount": "add"})
    zombie = WalSink(config)
    zombie.foreach_batch(frame(spark, [("a", Decimal("1.00"), 1)]), 0)
    settle(zombie)
    newer = WalSink(config)
    newer.start()
    assert newer.epoch == zombie.epoch + 1
    with pytest.raises(FencedError):
        zombie.foreach_batch(frame(spark, [("a", Decimal("2.00"), 2)]), 1)
    assert newer.wal.last_staged("s1") == 0, "the zombie must not stage"
    stage(
        frame(spark, [("a", Decimal("4.00"), 2)]), WalWriter(config.wal_path, "s1"), 1
    )
    with pytest.raises(FencedError):
        zombie.committer.apply(1)
    assert target() == {"a": Decimal("1.00")}
    assert newer.committer.apply(1).applied
    assert target() == {"a": Decimal("5.00")}


def test_new_checkpoint_for_known_sink_refuses_to_start(
    spark, db, target, make_config, tmp_path
):
    """I7 checkpoint reset is caught, at recovery and at the first batch."""
    config = make_config(merge={"amount": "add"}, checkpoint=tmp_path / "checkpoint")
    write_landing(tmp_path / "landing", BATCHES)
    sink = WalSink(config)
    sink.recover(spark)
    run_stream(spark, sink, tmp_path / "landing", tmp_path / "checkpoint")
    # The original checkpoint resumes fine.
    WalSink(config).recover(spark)
    # A fresh checkpoint does not.
    with pytest.raises(CheckpointResetError, match="already hold batch 2"):
        WalSink(config).recover(spark, checkpoint=str(tmp_path / "new-checkpoint"))
    # Nor does a query whose first batch is below what the sink knows.
    unchecked = WalSink(config)
    unchecked.start()
    with pytest.raises(CheckpointResetError, match="delivered batch 0 first"):
        unchecked.foreach_batch(frame(spark, [("x", Decimal(1), 1)]), 0)
    # Run as a real query on a reset checkpoint, it fails instead of skipping data.
    more = tmp_path / "more"
    write_landing(more, [[("n", "1.00", 9)]])
    with pytest.raises(StreamingQueryException, match="reset or replaced"):
        run_stream(spark, WalSink(config), more, tmp_path / "reset-checkpoint")
    assert "n" not in target()
