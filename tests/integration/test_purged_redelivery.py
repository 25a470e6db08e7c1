"""A batch that is acked, then purged from the WAL, and delivered again by Spark (a
crash after the committer applied it but before Spark wrote its commit log) is
skipped by its ack: the ack decides, whatever the WAL still holds."""

from __future__ import annotations

from decimal import Decimal

from tests.helpers import settle
from wal_sink import WalSink
from wal_sink.ops.purge import execute_purge, plan_purge

SCHEMA = "k STRING, amount DECIMAL(12,2)"


def test_acked_and_purged_batch_delivered_again_is_skipped_by_its_ack(
    spark, db, make_config
):
    for t in ("totals", "wal_sink_ack", "wal_sink_lease", "wal_sink_outbox"):
        db.execute(f"DROP TABLE IF EXISTS {t}")
    db.execute(
        "CREATE TABLE totals (k VARCHAR(8) PRIMARY KEY, amount DECIMAL(12,2)) "
        "ENGINE=InnoDB"
    )
    config = make_config(merge={"amount": "add"})
    df = spark.createDataFrame([("a", Decimal("2.50"))], SCHEMA)
    first = WalSink(config)
    first.foreach_batch(df, 0)
    settle(first)
    first.close()
    # The operator purges it while the job is down: its files leave the WAL, its
    # ack row stays (the newest is always kept).
    purger = WalSink(config)
    execute_purge(purger, plan_purge(purger, before=1))
    purger.close()
    purger.wal.refresh()
    assert purger.wal.staged_batch(0) is None
    # Spark never wrote batch 0 to its commit log, so the restart delivers it again.
    restarted = WalSink(config)
    restarted.recover(spark)
    restarted.foreach_batch(df, 0)
    settle(restarted)
    assert restarted.last_stage.rows is None, "the WAL's app transaction has it"
    restarted.close()
    assert db.rows("SELECT k, amount FROM totals") == [("a", Decimal("2.50"))]
    assert db.rows("SELECT batch_id, row_count FROM wal_sink_ack") == [(0, 1)]
