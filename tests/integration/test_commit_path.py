"""Holes a review found in the commit path, each closed and held by a test: the
quarantine keyed to the apply that set rows aside, empty vs missing batches, storage
errors inside the batch transaction, and start-up against a locked lease row."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from dataclasses import replace
from decimal import Decimal
from pathlib import Path

import pytest
from deltalake import DeltaTable

from tests.helpers import AMOUNT_NOTE_SCHEMA, amounts, staged
from wal_sink import TerminalError
from wal_sink.protocol.sink_instance import SinkInstance
from wal_sink.spark.staging import stage
from wal_sink.wal.quarantine import Quarantine


@pytest.fixture
def target(db):
    for t in ("acct", "wal_sink_ack", "wal_sink_lease", "wal_sink_outbox", "parent"):
        db.execute(f"DROP TABLE IF EXISTS {t}")
    db.execute(
        "CREATE TABLE acct (k VARCHAR(16) PRIMARY KEY, amount DECIMAL(8,2) NOT NULL,"
        " note VARCHAR(8)) ENGINE=InnoDB"
    )
    return lambda: dict(db.rows("SELECT k, amount FROM acct"))


POISON = [("k90", Decimal(1), "much-too-long"), ("k91", None, "null")]


def test_rollback_after_the_quarantine_write_leaves_each_entry_once(
    spark, db, target, make_config, monkeypatch
):
    """Rows set aside go into the outbox inside the batch transaction: when that
    transaction rolls back after them (here: a lost connection right before
    COMMIT), they roll back too, and the retry's entries are the only ones."""
    config = make_config(table="acct", merge={"amount": "add"})
    instance, committer = staged(spark, config, amounts(3) + POISON)
    monkeypatch.setenv("WAL_SINK_FAULT", "commit.before_commit:0:lost-once")
    result = committer.apply(0)
    assert (result.rows, result.quarantined) == (3, 2)
    ((apply_id,),) = db.rows("SELECT apply_id FROM wal_sink_ack")
    entries = Quarantine(config.quarantine_path, "s1").read(100)
    assert Counter(e["apply_id"] for e in entries) == {apply_id: 2}
    assert sorted(json.loads(e["record"])["note"] for e in entries) == [
        "much-too-long",
        "null",
    ]


def test_quarantine_write_failing_after_commit_keeps_rows_in_the_outbox(
    spark, db, target, make_config, tmp_path
):
    """The quarantine table is written after COMMIT, holding no MySQL lock; when it
    cannot be written the batch stays applied and its rows wait in the outbox."""
    blocked = tmp_path / "not-a-directory"
    blocked.write_text("a file where the quarantine table should go")
    config = make_config(table="acct", merge={"amount": "add"})
    config = replace(config, wal=replace(config.wal, quarantine_path=str(blocked)))
    instance, committer = staged(spark, config, amounts(3) + POISON)
    assert committer.apply(0).quarantined == 2
    assert target() == {f"k{i}": Decimal(i + 1) for i in range(3)}
    assert db.rows("SELECT COUNT(*) FROM wal_sink_outbox") == [(2,)]
    blocked.unlink()
    committer.outbox.drain(committer.engine)
    assert db.rows("SELECT COUNT(*) FROM wal_sink_outbox") == [(0,)]
    assert len(Quarantine(str(blocked), "s1").read(100)) == 2


def test_batch_removed_from_the_wal_is_a_terminal_error_not_an_empty_batch(
    spark, db, target, make_config
):
    """I1: a batch the WAL says was staged but whose files are no longer in the
    table (removed by hand) is never acked as empty."""
    config = make_config(table="acct", merge={"amount": "add"})
    instance, committer = staged(spark, config, amounts(2))
    stage(spark.createDataFrame(amounts(2, 10), AMOUNT_NOTE_SCHEMA), instance.writer, 1)
    DeltaTable(config.wal_path).delete("_wal_batch_id = 1")
    with pytest.raises(TerminalError, match="batch 1.*files are no longer") as info:
        SinkInstance(config).recover()
    assert "\n" not in str(info.value)
    assert db.rows("SELECT batch_id FROM wal_sink_ack") == [(0,)]
    assert target() == {"k0": Decimal(1), "k1": Decimal(2)}


def test_empty_batch_is_acked_with_no_rows(spark, db, target, make_config):
    config = make_config(table="acct")
    instance, committer = staged(spark, config, [])
    assert instance.wal.staged_batch(0).rows == 0, "an empty batch has a file"
    assert SinkInstance(config).recover()[0].rows == 0
    assert db.rows("SELECT batch_id, row_count FROM wal_sink_ack") == [(0, 0)]


def test_lost_file_is_one_line_naming_it_and_a_flaky_read_is_retried(
    spark, db, target, make_config, monkeypatch
):
    config = make_config(table="acct", merge={"amount": "add"})
    instance, committer = staged(spark, config, amounts(2))
    monkeypatch.setenv("WAL_SINK_FAULT", "wal.read:0:eio-once")
    assert committer.apply(0).rows == 2  # EIO once: retried with the batch
    monkeypatch.delenv("WAL_SINK_FAULT")
    stage(spark.createDataFrame(amounts(2, 10), AMOUNT_NOTE_SCHEMA), instance.writer, 1)
    instance.wal.refresh()
    lost = instance.wal.staged_batch(1).files[0].uri.removeprefix("file://")
    Path(lost).unlink()
    with pytest.raises(TerminalError, match="storage error at .*part-") as info:
        committer.apply(1)
    assert lost in str(info.value) and "\n" not in str(info.value)


def test_start_up_against_a_lease_row_locked_by_a_zombie_waits_it_out(
    db, mariadb, target, make_config
):
    """1205 (lock wait timeout) while taking the lease is transient: the start-up
    retries within the outage budget instead of failing."""
    config = make_config(table="acct")
    SinkInstance(config).start()
    with mariadb.root() as root, root.cursor() as cur:
        cur.execute("SET GLOBAL innodb_lock_wait_timeout = 1")
    zombie = db.connect()
    try:
        with zombie.cursor() as cur:
            cur.execute("BEGIN")
            cur.execute("SELECT * FROM wal_sink_lease FOR UPDATE")
        threading.Timer(3, zombie.rollback).start()
        started = time.monotonic()
        instance = SinkInstance(config)
        assert instance.start().epoch == 2
        assert time.monotonic() - started > 2.5
    finally:
        zombie.close()
        with mariadb.root() as root, root.cursor() as cur:
            cur.execute("SET GLOBAL innodb_lock_wait_timeout = 50")


def test_start_up_with_mysql_down_fails_once_the_outage_budget_is_spent(
    db, mariadb, target, make_config
):
    config = make_config(table="acct")
    down = replace(
        config,
        mysql=replace(
            config.mysql,
            url=f"mysql+pymysql://sink@127.0.0.1:{mariadb.port + 1}/x",
            outage_budget=1.0,
            retry_backoff=0.1,
        ),
    )
    started = time.monotonic()
    with pytest.raises(Exception, match="MySQL error 2003"):
        SinkInstance(down).start()
    assert 0.9 < time.monotonic() - started < 10
