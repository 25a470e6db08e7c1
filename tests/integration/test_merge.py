"""Merge semantics (docs/merge.md): overwrite / add / keep, the version guard, CDC."""

from __future__ import annotations

import time
from datetime import datetime, timezone
from decimal import Decimal

import pytest

from tests.helpers import server_default, settle
from wal_sink import ConfigError, TerminalError, WalSink
from wal_sink.spark.staging import stage
from wal_sink.wal.writer import WalWriter

SCHEMA = "k STRING, amount DECIMAL(12,2), label STRING, first_seen STRING, seq BIGINT"


@pytest.fixture
def target(db):
    for t in ("items", "wal_sink_ack", "wal_sink_lease"):
        db.execute(f"DROP TABLE IF EXISTS {t}")
    db.execute(
        "CREATE TABLE items (k VARCHAR(32) NOT NULL, amount DECIMAL(14,2), "
        "label VARCHAR(32), first_seen VARCHAR(32), seq BIGINT, "
        "UNIQUE KEY uk (k)) ENGINE=InnoDB"
    )
    return lambda: {
        r[0]: r[1:]
        for r in db.rows("SELECT k, amount, label, first_seen, seq FROM items")
    }


def rows(spark, *values):
    return spark.createDataFrame(list(values), SCHEMA)


def test_policies_overwrite_add_keep(spark, target, make_config):
    config = make_config(table="items", merge={"amount": "add", "first_seen": "keep"})
    sink = WalSink(config)
    sink.foreach_batch(rows(spark, ("a", Decimal(1), "x", "mon", 1)), 0)
    settle(sink)
    sink.foreach_batch(rows(spark, ("a", Decimal(2), "y", "tue", 2)), 1)
    settle(sink)
    assert target() == {"a": (Decimal(3), "y", "mon", 2)}


def test_replaying_older_batch_never_regresses_newer_value(
    spark, db, target, make_config
):
    config = make_config(table="items", merge={"amount": "add"}, version_column="seq")
    sink = WalSink(config)
    sink.foreach_batch(rows(spark, ("a", Decimal(1), "old", "", 5)), 0)
    settle(sink)
    sink.foreach_batch(rows(spark, ("a", Decimal(1), "new", "", 9)), 1)
    settle(sink)
    # Operator replays batch 0 (seq 5) after batch 1 (seq 9) landed.
    assert sink.committer.apply(0, force=True).applied
    label, seq = target()["a"][1], target()["a"][3]
    assert (label, seq) == ("new", 9)
    assert target()["a"][0] == Decimal(3), "add columns always add; the ack guards them"
    # An equal version still overwrites (>=).
    sink.foreach_batch(rows(spark, ("a", Decimal(0), "same", "", 9)), 2)
    settle(sink)
    assert target()["a"][1] == "same"


def test_version_guard_within_one_batch_keeps_highest(spark, target, make_config):
    config = make_config(table="items", version_column="seq")
    sink = WalSink(config)
    sink.foreach_batch(
        rows(
            spark, ("a", Decimal(1), "v7", "", 7), ("a", Decimal(1), "v3", "", 3)
        ).coalesce(1),
        0,
    )
    settle(sink)
    assert (target()["a"][1], target()["a"][3]) == ("v7", 7)


CDC_SCHEMA = "op STRING, k STRING, amount DECIMAL(12,2), label STRING, seq BIGINT"


def test_cdc_insert_update_delete_ends_as_last_op(spark, db, target, make_config):
    config = make_config(
        table="items",
        cdc={"op_column": "op", "order_by": "seq", "delete_values": ["D"]},
    )
    sink = WalSink(config)
    events = [
        ("I", "a", Decimal(1), "a1", 1),
        ("U", "a", Decimal(2), "a2", 2),
        ("D", "a", None, None, 3),
        ("I", "b", Decimal(5), "b1", 4),
        ("D", "b", None, None, 5),
        ("I", "b", Decimal(6), "b2", 6),
        ("I", "c", Decimal(9), "c1", 7),
        ("U", "c", Decimal(8), "c2", 8),
    ]
    # Shuffled and spread over partitions: the order must come from cdc.order_by.
    df = spark.createDataFrame(list(reversed(events)), CDC_SCHEMA).repartition(3)
    sink.foreach_batch(df, 0)
    settle(sink)
    got = {k: (v[0], v[1]) for k, v in target().items()}
    assert got == {"b": (Decimal(6), "b2"), "c": (Decimal(8), "c2")}
    assert db.rows("SELECT row_count, deleted_count FROM wal_sink_ack") == [(6, 2)]


def test_column_missing_from_target_is_one_clear_error(spark, db, target, make_config):
    """Refused before the batch is staged (a ConfigError: the way out is the
    config's or the table's), nothing written."""
    config = make_config(table="items")
    sink = WalSink(config)
    df = spark.createDataFrame([("a", 1)], "k STRING, colour INT")
    try:
        with pytest.raises(
            ConfigError, match="stream column 'colour' is not a column of table items"
        ) as info:
            sink.foreach_batch(df, 0)
            settle(sink)
    finally:
        sink.close()
    assert "\n" not in str(info.value) and "auto_evolve" in str(info.value)
    assert target() == {}
    assert db.rows("SELECT COUNT(*) FROM wal_sink_ack") == [(0,)]


def test_non_innodb_target_is_refused(spark, db, make_config):
    db.execute("DROP TABLE IF EXISTS myisam_items")
    db.execute("CREATE TABLE myisam_items (k VARCHAR(8) PRIMARY KEY) ENGINE=MyISAM")
    with pytest.raises(TerminalError, match="must be InnoDB"):
        WalSink(make_config(table="myisam_items")).start()


def test_timestamps_land_as_utc(spark, db, make_config, monkeypatch):
    """A stream timestamp lands as its UTC wall time in a DATETIME column and as
    the same instant in a TIMESTAMP one, whatever the time zone of the client
    process and of the server (both away from UTC here)."""
    db.execute("DROP TABLE IF EXISTS events")
    db.execute(
        "CREATE TABLE events (k VARCHAR(8) PRIMARY KEY, ts DATETIME(6), "
        "at TIMESTAMP(6) NULL) ENGINE=InnoDB"
    )
    ts = datetime(2026, 1, 2, 3, 4, 5, 600000, tzinfo=timezone.utc)
    monkeypatch.setenv("TZ", "America/St_Johns")  # -03:30
    time.tzset()
    try:
        with server_default(db, "time_zone", "+09:00"):
            sink = WalSink(make_config(table="events", sink_id="ts"))
            rows = spark.createDataFrame(
                [("a", ts, ts)], "k STRING, ts TIMESTAMP, at TIMESTAMP"
            )
            sink.foreach_batch(rows, 0)
            settle(sink)
    finally:
        monkeypatch.undo()
        time.tzset()
    assert db.rows("SELECT ts, UNIX_TIMESTAMP(at) FROM events") == [
        (datetime(2026, 1, 2, 3, 4, 5, 600000), Decimal(str(ts.timestamp())))
    ]


def test_staged_rows_keep_stream_order_across_files(spark, make_config, target):
    config = make_config(table="items", sink_id="order")
    sink = WalSink(config)
    sink.start()
    df = (
        spark.range(5000)
        .selectExpr(
            "cast(id as string) k",
            "cast(1 as decimal(12,2)) amount",
            "'x' label",
            "'' first_seen",
            "id seq",
        )
        .repartition(4)
    )
    spark.conf.set("spark.sql.adaptive.coalescePartitions.enabled", "false")
    try:  # several range partitions, hence several files
        stage(df, WalWriter(config.wal_path, "order"), 0, "seq")
    finally:
        spark.conf.unset("spark.sql.adaptive.coalescePartitions.enabled")
    batch = sink.wal.staged_batch(0)
    assert len(batch.files) > 1
    seqs = [
        s
        for chunk in sink.wal.read_batch(batch, 700)
        for s in chunk.column("seq").to_pylist()
    ]
    assert seqs == list(range(5000))
