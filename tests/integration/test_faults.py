"""Faults and bad input against the real MariaDB (DESIGN.md §3): each test ends with
MySQL exact and the quarantine holding exactly the bad rows."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import replace
from decimal import Decimal

import pytest

from wal_sink import TransientError
from wal_sink.committer import Committer
from wal_sink.db import make_engine
from wal_sink.instance import SinkInstance
from wal_sink.quarantine import Quarantine
from wal_sink.staging import stage
from wal_sink.wal import WalReader

SCHEMA = "k STRING, amount DECIMAL(12,2), note STRING"


@pytest.fixture
def target(db):
    for t in ("acct", "wal_sink_ack", "wal_sink_lease", "parent", "bulk"):
        db.execute(f"DROP TABLE IF EXISTS {t}")
    db.execute("CREATE TABLE parent (k VARCHAR(16) PRIMARY KEY) ENGINE=InnoDB")
    db.execute("CREATE TABLE acct (k VARCHAR(16) PRIMARY KEY, amount DECIMAL(8,2) NOT NULL,"
               " note VARCHAR(8), CONSTRAINT fk FOREIGN KEY (k) REFERENCES parent (k))"
               " ENGINE=InnoDB")
    db.execute("INSERT INTO parent VALUES " + ",".join(f"('k{i}')" for i in range(50)))
    return lambda: dict(db.rows("SELECT k, amount FROM acct"))


def staged(spark, config, rows, batch_id=0, partitions=1):
    instance = SinkInstance(config)
    committer = instance.start()
    stage(spark.createDataFrame(rows, SCHEMA).coalesce(partitions), sink_id=config.sink.id,
          batch_id=batch_id, path=config.wal_path)
    return instance, committer


def amounts(n, start=0):
    return [(f"k{i}", Decimal(i + 1), "ok") for i in range(start, start + n)]


def test_poison_rows_are_quarantined_and_the_rest_commits(spark, db, target, make_config):
    config = make_config(table="acct", merge={"amount": "add"}, chunk_rows=7)
    good = amounts(20)
    poison = [
        (None, Decimal(1), "nullkey"),            # null key column
        ("k30", Decimal(1), "much-too-long"),     # 1406 data too long
        ("k31", Decimal("123456789.00"), "range"),  # 1264 out of range
        ("k32", None, "nullamt"),                   # 1048 null into NOT NULL
        ("nope", Decimal(1), "fk"),                 # 1452 foreign key
    ]
    rows = good[:7] + poison[:2] + good[7:14] + poison[2:] + good[14:]
    instance, committer = staged(spark, config, rows)
    result = committer.apply(0)
    assert (result.rows, result.quarantined) == (20, 5)
    assert target() == {k: a for k, a, _ in good}
    assert db.rows("SELECT row_count, quarantined FROM wal_sink_ack") == [(20, 5)]
    entries = Quarantine(config.quarantine_path, "s1").read(100)
    reasons = {json.loads(e["record"])["note"]: e["reason"] for e in entries}
    assert len(entries) == 5 and all(e["batch_id"] == 0 for e in entries)
    assert reasons["nullkey"].startswith("null key column(s): k")
    assert {note: reason.split(":")[0] for note, reason in reasons.items()} == {
        "nullkey": "null key column(s)", "much-too-long": "MySQL error 1406",
        "range": "MySQL error 1264", "nullamt": "MySQL error 1048", "fk": "MySQL error 1452"}
    # A retried or replayed batch does not record its bad rows twice.
    committer.apply(0, force=True)
    assert len(Quarantine(config.quarantine_path, "s1").read(100)) == 5


def test_deadlock_victim_batch_is_retried_whole(spark, db, target, make_config):
    config = make_config(table="acct", merge={"amount": "add"}, chunk_rows=1)
    instance, committer = staged(spark, config, amounts(2))
    db.execute("INSERT INTO acct VALUES ('k0', 100, 'x'), ('k1', 100, 'x')")
    db.execute("CREATE TABLE bulk (i INT PRIMARY KEY, v INT) ENGINE=InnoDB")
    db.execute("INSERT INTO bulk SELECT seq, 0 FROM seq_1_to_2000")
    other = db.connect()
    blocked = threading.Event()
    first_attempt = [True]

    def lock_in_opposite_order(done: int, total: int) -> None:
        if not first_attempt[0] or done != 1:
            return
        first_attempt[0] = False  # the sink now holds k0; the other session takes k1
        with other.cursor() as cur:
            cur.execute("BEGIN")
            cur.execute("UPDATE bulk SET v = v + 1")  # heavier: the sink is the victim
            cur.execute("UPDATE acct SET note = 'other' WHERE k = 'k1'")

        def then_k0() -> None:
            blocked.set()
            with other.cursor() as cur:
                cur.execute("UPDATE acct SET note = 'other' WHERE k = 'k0'")
                cur.execute("COMMIT")
        threading.Thread(target=then_k0, daemon=True).start()
        blocked.wait()
        time.sleep(0.3)

    result = committer.apply(0, on_chunk=lock_in_opposite_order)
    assert result.applied and result.rows == 2
    assert target() == {"k0": Decimal(101), "k1": Decimal(102)}
    assert db.rows("SELECT COUNT(*) FROM wal_sink_ack") == [(1,)]
    other.close()


def test_lock_held_past_wait_timeout_is_retried(spark, db, mariadb, target, make_config):
    with mariadb.root() as root, root.cursor() as cur:
        cur.execute("SET GLOBAL innodb_lock_wait_timeout = 1")
    try:
        config = make_config(table="acct", merge={"amount": "add"})
        instance, committer = staged(spark, config, amounts(3))
        holder = db.connect()
        with holder.cursor() as cur:
            cur.execute("BEGIN")
            cur.execute("INSERT INTO acct VALUES ('k2', 5, 'held')")
        threading.Timer(2.5, lambda: holder.commit()).start()
        started = time.monotonic()
        assert committer.apply(0).rows == 3
        assert time.monotonic() - started > 2
        assert target() == {"k0": Decimal(1), "k1": Decimal(2), "k2": Decimal(8)}
        holder.close()
    finally:
        with mariadb.root() as root, root.cursor() as cur:
            cur.execute("SET GLOBAL innodb_lock_wait_timeout = 50")


def _kill_sink_transaction(db) -> None:
    (thread,), = db.rows("SELECT trx_mysql_thread_id FROM information_schema.INNODB_TRX t "
                         "JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id"
                         " WHERE p.USER = 'sink'")
    db.execute(f"KILL CONNECTION {int(thread)}")


def test_connection_killed_mid_transaction_is_retried(spark, db, target, make_config):
    config = make_config(table="acct", merge={"amount": "add"}, chunk_rows=2)
    instance, committer = staged(spark, config, amounts(6))
    killed = []

    def kill_once(done: int, total: int) -> None:
        if not killed:
            killed.append(done)
            _kill_sink_transaction(db)

    assert committer.apply(0, on_chunk=kill_once).rows == 6
    assert killed and target() == {f"k{i}": Decimal(i + 1) for i in range(6)}


def test_lost_commit_reply_reads_the_ack_instead_of_reapplying(spark, db, target,
                                                               make_config, monkeypatch):
    config = make_config(table="acct", merge={"amount": "add"})
    instance, committer = staged(spark, config, amounts(4))
    monkeypatch.setenv("WAL_SINK_FAULT", "commit.after_commit:0:lost-once")
    result = committer.apply(0)
    assert result.applied is False, "the retry found the ack: COMMIT had succeeded"
    assert target() == {f"k{i}": Decimal(i + 1) for i in range(4)}
    # The same for a forced replay: it adds once, not twice.
    monkeypatch.setenv("WAL_SINK_FAULT", "commit.after_commit:0:lost-once")
    from wal_sink import faults

    faults._raised.clear()
    result = committer.apply(0, force=True)
    assert target() == {f"k{i}": 2 * Decimal(i + 1) for i in range(4)}


def test_server_down_for_seconds_mid_batch(spark, db, mariadb, target, make_config):
    config = make_config(table="acct", merge={"amount": "add"}, chunk_rows=2)
    instance, committer = staged(spark, config, amounts(6))
    restarted = threading.Event()

    def crash_server_once(done: int, total: int) -> None:
        if restarted.is_set() or done != 2:
            return
        mariadb.stop()  # SIGKILL: InnoDB rolls the open transaction back on restart

        def start_again() -> None:
            time.sleep(3)
            mariadb.start()
            restarted.set()
        threading.Thread(target=start_again, daemon=True).start()
        time.sleep(0.2)

    result = committer.apply(0, on_chunk=crash_server_once)
    assert restarted.is_set() and result.rows == 6
    assert target() == {f"k{i}": Decimal(i + 1) for i in range(6)}
    assert db.rows("SELECT batch_id, row_count FROM wal_sink_ack") == [(0, 6)]


def test_transient_errors_beyond_the_limit_fail_the_batch(spark, db, target, make_config,
                                                          mariadb):
    config = make_config(table="acct")
    staged(spark, config, amounts(2))
    unreachable = replace(config, mysql=replace(
        config.mysql, url=f"mysql+pymysql://sink@127.0.0.1:{mariadb.port + 1}/x",
        retry_attempts=2, retry_backoff=0.05))
    committer = Committer(unreachable, make_engine(unreachable.mysql),
                          WalReader(unreachable.wal_path), epoch=1)
    with pytest.raises(TransientError, match="MySQL error 2003"):
        committer.apply(0)
